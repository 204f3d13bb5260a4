package mountdetect

import (
	"errors"
	"io/fs"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nodevol/nodevol/internal/base/fsat"
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

// TestLookAtSwapRace: LookAt of a name that is not opened reads the
// entry's two mount IDs with two statx calls (Linux 6.8 gives the unique
// and the classic ID one per call), each resolving the name. An attacker
// in another mount namespace exchanges a plain directory with a mount
// point under it between them; an Entry must never mix the two files (the
// mount root's flag with the directory's mount ID, or the reverse): a
// scan finds the entry's mount in the table by that ID. A change seen
// between the calls is an error, never a mixed answer.
func TestLookAtSwapRace(t *testing.T) {
	mounttest.RequireMounts(t)
	base := t.TempDir()
	mounttest.Build(t, base, "dir plain", "dir m")
	fd, err := unix.Open(base, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	// Started before the mount is made: in its namespace both names are
	// plain directories it can exchange.
	a := mounttest.StartAttacker(t, func() error { return mounttest.Exchange(fd, "plain", "m") })
	var st unix.Stat_t
	if err := unix.Fstatat(fd, "plain", &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		t.Fatal(err)
	}
	plainIno := st.Ino
	if err := unix.Mount("tmpfs", filepath.Join(base, "m"), "tmpfs", 0, "size=64k"); err != nil {
		t.Fatal(err)
	}
	defer func() {
		a.Pause()
		// The mount is under either name now.
		for _, name := range []string{"m", "plain"} {
			if mounttest.IsMountRoot(t, filepath.Join(base, name)) {
				if err := unix.Unmount(filepath.Join(base, name), unix.MNT_DETACH); err != nil {
					t.Error(err)
				}
			}
		}
	}()
	parent, err := fsat.StatMount(fd, "", fsat.TableID)
	if err != nil {
		t.Fatal(err)
	}
	root, err := fsat.StatMount(fd, "m", fsat.TableID)
	if err != nil || !root.Root {
		t.Fatalf("the tmpfs on m: %+v, %v", root, err)
	}
	a.Resume()
	iterations := 20000
	if testing.Short() {
		iterations = 2000
	}
	changed, mixed := 0, 0
	for i := 0; i < iterations && mixed < 5; i++ {
		e, err := LookAt(fd, "m", filepath.Join(base, "m"), LookOnly)
		if errors.Is(err, errChanged) {
			changed++
			continue
		}
		if err != nil {
			t.Fatalf("LookAt: %v", err)
		}
		isRoot := e.Root && e.ID == root.ID && e.Ino == root.Ino
		isPlain := !e.Root && e.ID == parent.ID && e.Ino == plainIno
		if !isRoot && !isPlain {
			mixed++
			t.Errorf("iteration %d: LookAt mixed two files: root=%v mount ID %d inode %d (the tmpfs: mount %d inode %d; the plain directory: mount %d inode %d)",
				i, e.Root, e.ID, e.Ino, root.ID, root.Ino, parent.ID, plainIno)
		}
	}
	t.Logf("%d lookups, %d saw the entry change, %d swaps", iterations, changed, a.Steps())
}
