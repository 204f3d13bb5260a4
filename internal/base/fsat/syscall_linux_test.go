package fsat_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nodevol/nodevol/internal/base/fsat"
)

// TestNamesOfEveryLength: a name is handed to the kernel whole whatever
// its length — up to NAME_MAX from the stack, a longer path from the
// heap — and one holding a NUL is refused (EINVAL) rather than cut at it.
func TestNamesOfEveryLength(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []int{1, 254, 255} {
		name := strings.Repeat("n", n)
		if err := os.WriteFile(filepath.Join(dir, name), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		fd, err := fsat.Openat(unix.AT_FDCWD, filepath.Join(dir, name), unix.O_RDONLY, 0)
		if err != nil {
			t.Fatalf("Openat of a %d-byte name: %v", n, err)
		}
		unix.Close(fd)
		d, err := fsat.OpenRoot(dir)
		if err != nil {
			t.Fatal(err)
		}
		if s, err := fsat.StatMount(d.Fd(), name, 0); err != nil || s.Mode != unix.S_IFREG || s.Size != 1 {
			t.Errorf("StatMount of a %d-byte name = %+v, %v; want a regular file of 1 byte", n, s, err)
		}
		if b, err := d.ReadFile(name, 1); err != nil || string(b) != "x" {
			t.Errorf("ReadFile of a %d-byte name = %q, %v", n, b, err)
		}
		d.Close()
	}
	// A path longer than the stack buffer: several components, from the
	// heap.
	deep := dir
	for range 3 {
		deep = filepath.Join(deep, strings.Repeat("d", 200))
	}
	if err := os.MkdirAll(deep, 0o700); err != nil {
		t.Fatal(err)
	}
	d, err := fsat.OpenRoot(deep)
	if err != nil {
		t.Fatalf("OpenRoot of a %d-byte path: %v", len(deep), err)
	}
	d.Close()
	root, err := fsat.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	if sub, err := root.OpenDir(strings.TrimPrefix(deep, dir+"/")); err != nil {
		t.Errorf("OpenDir of a %d-byte relative path: %v", len(deep)-len(dir)-1, err)
	} else {
		sub.Close()
	}
	for _, name := range []string{"n\x00", strings.Repeat("n", 300) + "\x00"} {
		if _, err := fsat.Openat(root.Fd(), name, unix.O_RDONLY, 0); !errors.Is(err, unix.EINVAL) {
			t.Errorf("Openat of a name with a NUL (%d bytes): %v; want EINVAL", len(name), err)
		}
		if _, err := fsat.StatMount(root.Fd(), name, 0); !errors.Is(err, unix.EINVAL) {
			t.Errorf("StatMount of a name with a NUL (%d bytes): %v; want EINVAL", len(name), err)
		}
	}
}

// TestSystemCallsDoNotAllocate: the wrappers a scan calls for every entry
// pass names from the stack; a name allocated per call was most of a
// scan's allocations.
func TestSystemCallsDoNotAllocate(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "f"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	d, err := fsat.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	for _, tc := range []struct {
		name string
		fn   func()
	}{
		{"StatMount", func() {
			if _, err := fsat.StatMount(d.Fd(), "f", fsat.MountKey); err != nil {
				t.Fatal(err)
			}
		}},
		{"Openat and Reopen", func() {
			fd, err := fsat.Openat(d.Fd(), "f", unix.O_PATH, 0)
			if err != nil {
				t.Fatal(err)
			}
			fd2, err := fsat.Reopen(fd, unix.O_RDONLY)
			if err != nil {
				t.Fatal(err)
			}
			unix.Close(fd)
			unix.Close(fd2)
		}},
		{"Openat2", func() {
			fd, err := fsat.Openat2(d.Fd(), "f", &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_BENEATH})
			if err != nil {
				t.Fatal(err)
			}
			unix.Close(fd)
		}},
	} {
		if n := testing.AllocsPerRun(100, tc.fn); n != 0 {
			t.Errorf("%s: %v allocations per call; want 0", tc.name, n)
		}
	}
}
