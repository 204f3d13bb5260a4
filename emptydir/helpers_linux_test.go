package emptydir

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// readMetadata reads metaDir's nodevol.json by path, for tests.
func readMetadata(metaDir string) (*Metadata, error) {
	b, err := os.ReadFile(filepath.Join(metaDir, metaFileName))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return parseMetadata(b, filepath.Join(metaDir, metaFileName))
}

// isReady reports whether metaDir holds the ready marker, for tests.
func isReady(metaDir string) bool {
	fi, err := os.Lstat(filepath.Join(metaDir, readyFileName))
	return err == nil && fi.Mode().IsRegular()
}

// detach unmounts path lazily, for test clean-ups only.
func detach(path string) error { return unix.Unmount(path, unix.MNT_DETACH) }
