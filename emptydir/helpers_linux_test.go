package emptydir

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nodevol/nodevol/fsquota"
	"github.com/nodevol/nodevol/internal/base/friend"
	"github.com/nodevol/nodevol/internal/base/testhook"
)

// quotaTestHook and quotaTestKernel are fsquota's test options (its crash
// points; project limits kept in k instead of quotactl), which fsquota
// offers nodevol's packages through friend, not its API.
func quotaTestHook(h testhook.Hook) fsquota.Option { return friend.QuotaHook(h).(fsquota.Option) }

func quotaTestKernel(k testhook.QuotaKernel) fsquota.Option {
	return friend.QuotaKernel(k).(fsquota.Option)
}

// readMetadata reads metaDir's nodevol.json by path, for tests.
func readMetadata(metaDir string) (*metadata, error) {
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

// volumesDir creates the pod's kubernetes.io~empty-dir volumes directory
// and returns its path and a descriptor of it (closed when the test ends),
// through which an attacker renames volume directories.
func (e *env) volumesDir(t *testing.T) (vols string, vfd int) {
	t.Helper()
	volDir, err := e.layout.VolumeDir(testUID, PluginName, "cache")
	if err != nil {
		t.Fatal(err)
	}
	vols = filepath.Dir(volDir)
	if err := os.MkdirAll(vols, 0o750); err != nil {
		t.Fatal(err)
	}
	vfd, err = unix.Open(vols, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(vfd) })
	return vols, vfd
}

// openDirFd opens the directory at path for a test, closed when it ends:
// the descriptor fsquota's calls take.
func openDirFd(t *testing.T, path string) int {
	t.Helper()
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("open %s: %v", path, err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}
