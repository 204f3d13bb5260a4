//go:build linux

package main

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/nodevol/nodevol/internal/mounttest"
)

// A demo that stops half-way (a broken promise, a failed SetUp) leaves its
// volumes mounted; cleanup must unmount them and still remove the sandbox.
func TestDemoCleanupUnmountsWhatIsLeft(t *testing.T) {
	mounttest.RequireMounts(t)
	tmp, err := os.MkdirTemp("", "nodevol-demo-test-")
	if err != nil {
		t.Fatal(err)
	}
	d := &demo{out: io.Discard, tmp: tmp}
	if err := d.build(); err != nil {
		t.Fatal(err)
	}
	scratch := filepath.Join(filepath.Dir(d.vol), "scratch")
	nested := filepath.Join(scratch, "nested")
	for _, dir := range []string{scratch, nested} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=1m"); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { // only if cleanup failed
		syscall.Unmount(nested, syscall.MNT_DETACH)
		syscall.Unmount(scratch, syscall.MNT_DETACH)
		os.RemoveAll(tmp)
	})
	d.mountedOnce = true
	if err := d.cleanup(); err != nil {
		t.Fatalf("cleanup() = %v; want nil", err)
	}
	if _, err := os.Lstat(tmp); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("cleanup left %s behind (%v)", tmp, err)
	}
}
