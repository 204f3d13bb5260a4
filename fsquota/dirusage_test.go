package fsquota_test

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/nodevol/nodevol/fsquota"
)

// TestDirUsageWalk: a directory without a project quota is measured by a
// walk, and DirUsage says why the quota was not used.
func TestDirUsageWalk(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("skipping: DiskUsage is Linux-only")
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "a"), []byte(strings.Repeat("x", 20000)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(filepath.Join(dir, "a"), filepath.Join(dir, "a-again")); err != nil {
		t.Fatal(err)
	}
	u, err := fsquota.New().DirUsage(dir)
	if err != nil {
		t.Fatalf("DirUsage(%q) = %v", dir, err)
	}
	if u.Source != fsquota.SourceWalk || u.Source.String() != "walk" || u.Inodes != 2 || u.Bytes <= 0 {
		t.Errorf("DirUsage(%q) = %+v; want a walk of 2 inodes (the hard link once)", dir, u)
	}
	switch {
	case u.ProjectID == 0 && errors.Is(u.NoQuota, fsquota.ErrNoProject):
		if got := u.NoQuota.Error(); got != "the directory has no project ID" {
			t.Errorf("NoQuota = %q; want %q", got, "the directory has no project ID")
		}
	case errors.Is(u.NoQuota, errors.ErrUnsupported):
	default:
		t.Errorf("DirUsage(%q).NoQuota = %v; want ErrNoProject or errors.ErrUnsupported", dir, u.NoQuota)
	}
	if _, err := fsquota.New().DirUsage(filepath.Join(dir, "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("DirUsage(missing) = %v; want ErrNotExist", err)
	}
}

func TestSourceString(t *testing.T) {
	for s, want := range map[fsquota.Source]string{fsquota.SourceQuota: "quota", fsquota.SourceWalk: "walk", 0: "Source(0)"} {
		if got := s.String(); got != want {
			t.Errorf("Source(%d).String() = %q; want %q", int(s), got, want)
		}
	}
}
