package emptydir

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/nodevol/nodevol/mountdetect"
)

const (
	readyFileName = "ready"        // the kubelet's marker: SetUp completed
	metaFileName  = "nodevol.json" // what SetUp created, for TearDown and reconstruction
	metaDirMode   = 0o750
)

// Metadata is what SetUp records beside the ready marker in
// <root>/pods/<uid>/plugins/kubernetes.io~empty-dir/<volume>/nodevol.json.
// TearDown still verifies the medium on disk: the disk is the truth.
type Metadata struct {
	Medium         mountdetect.Medium `json:"medium"`
	SizeLimit      int64              `json:"sizeLimit,omitempty"` // the spec's sizeLimit
	SizeBytes      int64              `json:"sizeBytes,omitempty"` // the tmpfs size= SetUp chose
	HugePageSize   int64              `json:"hugePageSize,omitempty"`
	QuotaProjectID uint32             `json:"quotaProjectID,omitempty"`
}

// UnmarshalJSON reads Medium from its name.
func (m *Metadata) UnmarshalJSON(b []byte) error {
	type plain Metadata
	var raw struct {
		plain
		Medium string `json:"medium"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	*m = Metadata(raw.plain)
	switch raw.Medium {
	case "Default", "":
		m.Medium = mountdetect.MediumDefault
	case "Memory":
		m.Medium = mountdetect.MediumMemory
	case "HugePages":
		m.Medium = mountdetect.MediumHugePages
	default:
		return fmt.Errorf("unknown medium %q", raw.Medium)
	}
	return nil
}

// readMetadata returns the recorded metadata, or nil when there is none.
func readMetadata(metaDir string) (*Metadata, error) {
	b, err := os.ReadFile(filepath.Join(metaDir, metaFileName))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var m Metadata
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("parse %s: %w", filepath.Join(metaDir, metaFileName), err)
	}
	return &m, nil
}

// writeMetadata writes the metadata file atomically (temporary file,
// fsync, rename), so a crash leaves the old or the new file, never half.
func writeMetadata(metaDir string, m *Metadata) error {
	if err := makeMetaDir(metaDir); err != nil {
		return err
	}
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(metaDir, "."+metaFileName+".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), filepath.Join(metaDir, metaFileName))
}

func isReady(metaDir string) bool {
	fi, err := os.Lstat(filepath.Join(metaDir, readyFileName))
	return err == nil && fi.Mode().IsRegular()
}

// makeMetaDir creates the metadata directory with mode 0750 whatever the
// umask.
func makeMetaDir(metaDir string) error {
	if err := os.MkdirAll(metaDir, metaDirMode); err != nil {
		return err
	}
	return os.Chmod(metaDir, metaDirMode)
}

func setReady(metaDir string) error {
	if err := makeMetaDir(metaDir); err != nil {
		return err
	}
	f, err := os.OpenFile(filepath.Join(metaDir, readyFileName), os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	return f.Close()
}

// removeMetadata removes the ready marker, the metadata file and the
// now-empty metadata directory, and nothing else: anything unexpected in
// the directory makes the final rmdir fail with an error.
func removeMetadata(metaDir string) error {
	for _, name := range []string{readyFileName, metaFileName} {
		if err := os.Remove(filepath.Join(metaDir, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	if err := os.Remove(metaDir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}
