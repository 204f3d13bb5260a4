package fsat_test

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/nodevol/nodevol/internal/base/fsat"
	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
)

// TestReadFile: ReadFile reads a regular file of at most max bytes whole,
// and refuses, without blocking or following anything, a symlink, a FIFO,
// a directory, a file larger than max and a file that is a mount point
// (a bind mount of another file: opening it would reach the mounted
// filesystem). A name of several components takes the statx-then-openat
// path; it must refuse the same.
func TestReadFile(t *testing.T) {
	for _, tc := range []struct {
		name    string
		mounts  bool
		prepare func(t *testing.T, dir string)
		file    string
		max     int64
		want    error // nil: the content "data"
	}{
		{name: "regular", file: "f", max: 4},
		{name: "empty", file: "empty", max: 4},
		{name: "regular in a subdirectory", file: "sub/f", max: 4},
		{name: "too large", file: "f", max: 3, want: fsat.ErrTooLarge},
		{name: "symlink", file: "link", max: 100, want: fsat.ErrSymlink},
		{name: "FIFO", file: "fifo", max: 100, want: fsat.ErrNotRegular},
		{name: "directory", file: "sub", max: 100, want: fsat.ErrNotRegular},
		{name: "missing", file: "missing", max: 100, want: fs.ErrNotExist},
		{name: "mount point", mounts: true, file: "mounted", max: 100, want: fsat.ErrOtherMount,
			prepare: func(t *testing.T, dir string) {
				mounttest.Bind(t, filepath.Join(dir, "f"), filepath.Join(dir, "mounted"))
			}},
		{name: "mount point in a subdirectory", mounts: true, file: "sub/mounted", max: 100, want: fsat.ErrOtherMount,
			prepare: func(t *testing.T, dir string) {
				mounttest.Bind(t, filepath.Join(dir, "f"), filepath.Join(dir, "sub", "mounted"))
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.mounts {
				mounttest.RequireMounts(t)
			}
			dir := t.TempDir()
			mounttest.Build(t, dir, "file f data", "file empty", "file sub/f data", "symlink link f")
			if err := syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o600); err != nil {
				t.Fatal(err)
			}
			if tc.prepare != nil {
				tc.prepare(t, dir)
			}
			d, err := fsat.OpenRoot(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			b, err := d.ReadFile(tc.file, tc.max)
			switch {
			case tc.want != nil && !errors.Is(err, tc.want):
				t.Errorf("ReadFile(%q) = %q, %v; want %v", tc.file, b, err, tc.want)
			case tc.want == nil && err != nil:
				t.Errorf("ReadFile(%q): %v", tc.file, err)
			case tc.want == nil:
				want, _ := os.ReadFile(filepath.Join(dir, tc.file))
				if !bytes.Equal(b, want) {
					t.Errorf("ReadFile(%q) = %q; want %q", tc.file, b, want)
				}
			}
		})
	}
}

// TestReadFileReadsWhatReturnsLittleAtATime: a read that returns less than
// asked is not the end of every file. A procfs file (seq_file) returns a
// page at a time and says it has size 0; ReadFile must read it to its end,
// as it must a FUSE file whose daemon answers in pieces. (It stops at a
// read that returns exactly the size statx gave.) The mount table of a
// namespace with a hundred more mounts is several pages long.
func TestReadFileReadsWhatReturnsLittleAtATime(t *testing.T) {
	mounttest.RequireMounts(t)
	mounttest.ManyMounts(t, t.TempDir(), 100)
	want, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	if len(want) < 3*4096 {
		t.Fatalf("the mount table is %d bytes; want several pages", len(want))
	}
	d, err := fsat.OpenRoot("/proc/self")
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	got, err := d.ReadFile("mountinfo", 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("ReadFile of /proc/self/mountinfo returned %d bytes; os.ReadFile %d", len(got), len(want))
	}
}
