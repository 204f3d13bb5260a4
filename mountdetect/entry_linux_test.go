package mountdetect

import (
	"errors"
	"io/fs"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
)

// TestLookAt: what LookAt says of each kind of entry, what it opens, and
// the mount the table gives for it.
func TestLookAt(t *testing.T) {
	mounttest.RequireMounts(t)
	base := t.TempDir()
	mounttest.Build(t, base, "dir d/x", "dir m", "file f x", "symlink l d")
	mounttest.Tmpfs(t, filepath.Join(base, "m"), "size=64k")
	dirfd, err := unix.Open(base, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(dirfd)
	tab, err := ReadMountTable()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		open     Open
		mode     uint32
		root     bool
		wantFlag int // the open's access mode; -1: nothing open
		fsType   string
	}{
		{"d", OpenDir, unix.S_IFDIR, false, unix.O_RDONLY, ""},
		{"m", OpenDir, unix.S_IFDIR, true, unix.O_PATH, "tmpfs"},
		{"f", OpenDir, unix.S_IFREG, false, -1, ""},
		{"l", OpenDir, unix.S_IFLNK, false, -1, ""},
		{"l", OpenPath, unix.S_IFLNK, false, unix.O_PATH, ""},
		{"d", OpenPath, unix.S_IFDIR, false, unix.O_PATH, ""},
		{"m", LookOnly, unix.S_IFDIR, true, -1, "tmpfs"},
	} {
		path := filepath.Join(base, tc.name)
		e, err := LookAt(dirfd, tc.name, path, tc.open)
		if err != nil {
			t.Errorf("LookAt(%s, %v) = %v", tc.name, tc.open, err)
			continue
		}
		if e.Path != path || e.Mode != tc.mode || e.Root != tc.root || e.ID == 0 {
			t.Errorf("LookAt(%s, %v) = %+v; want mode %#o, root %v, a mount ID", tc.name, tc.open, e, tc.mode, tc.root)
		}
		switch {
		case tc.wantFlag < 0 && e.Fd >= 0:
			t.Errorf("LookAt(%s, %v) opened it", tc.name, tc.open)
		case tc.wantFlag >= 0 && e.Fd < 0:
			t.Errorf("LookAt(%s, %v) did not open it", tc.name, tc.open)
		case tc.wantFlag >= 0:
			fl, err := unix.FcntlInt(uintptr(e.Fd), unix.F_GETFL, 0)
			if err != nil || fl&(unix.O_PATH|unix.O_ACCMODE) != tc.wantFlag {
				t.Errorf("LookAt(%s, %v) opened it with flags %#o, %v; want %#o", tc.name, tc.open, fl, err, tc.wantFlag)
			}
		}
		if tc.root {
			m, ok, err := tab.MountOf(e)
			if err != nil || !ok || m.FSType != tc.fsType {
				t.Errorf("MountOf(%s) = %+v, %v, %v; want a %s mount", tc.name, m, ok, err, tc.fsType)
			}
			if info := e.InfoFromTable(m); info.Magic != MagicTmpfs || !info.MountPoint || info.Path != path {
				t.Errorf("InfoFromTable(%s) = %+v", tc.name, info)
			}
		}
		e.Close()
		if e.Fd != -1 {
			t.Errorf("Close left Fd %d", e.Fd)
		}
	}
	if _, err := LookAt(dirfd, "missing", filepath.Join(base, "missing"), OpenDir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("LookAt(missing) = %v; want fs.ErrNotExist", err)
	}
}

// TestLookAtStalledFUSE: a FUSE mount whose daemon never answers, on a
// directory and on a file, is looked at, opened (O_PATH) and found in the
// table without being asked anything.
func TestLookAtStalledFUSE(t *testing.T) {
	mounttest.RequireMounts(t)
	base := t.TempDir()
	mounttest.Build(t, base, "dir d", "file f x")
	stalledFUSE(t, filepath.Join(base, "d"), "040000")
	stalledFUSE(t, filepath.Join(base, "f"), "0100000")
	dirfd, err := unix.Open(base, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(dirfd)
	for _, name := range []string{"d", "f"} {
		for _, open := range []Open{OpenDir, OpenPath} {
			within5s(t, "LookAt "+name, func() error {
				e, err := LookAt(dirfd, name, filepath.Join(base, name), open)
				if err != nil {
					return err
				}
				defer e.Close()
				if !e.Root {
					t.Errorf("LookAt(%s) = %+v; want a mount root", name, e)
				}
				m, ok, err := (*MountTable)(nil).MountOf(e)
				if err != nil || !ok || m.FSType != "fuse" {
					t.Errorf("MountOf(%s) = %+v, %v, %v; want the fuse mount", name, m, ok, err)
				}
				return nil
			})
		}
	}
}
