package fsat_test

import (
	"bufio"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nodevol/nodevol/internal/base/fsat"
	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
)

// tableMountID is the ID /proc/self/mountinfo lists for the mount point
// path (the last, topmost, of those stacked there).
func tableMountID(t *testing.T, path string) uint64 {
	t.Helper()
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var id uint64
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 4 && fields[4] == path {
			if id, err = strconv.ParseUint(fields[0], 10, 64); err != nil {
				t.Fatal(err)
			}
		}
	}
	if id == 0 {
		t.Fatalf("%s is not in /proc/self/mountinfo", path)
	}
	return id
}

// TestStatMount: the IDs StatMount gives are the table's (TableID) and,
// where the kernel has them, the unique ones (MountKey), one mount root
// and one directory beneath it agree, a symlink is looked at itself, and
// statx's own errors come back as the errno.
func TestStatMount(t *testing.T) {
	mounttest.RequireMounts(t)
	base := t.TempDir()
	m := filepath.Join(base, "m")
	mounttest.Build(t, base, "dir m", "symlink link m")
	mounttest.Tmpfs(t, m, "size=64k")
	mounttest.Build(t, m, "dir sub")
	real, err := filepath.EvalSymlinks(m)
	if err != nil {
		t.Fatal(err)
	}

	both := fsat.MountKey | fsat.TableID
	root, err := fsat.StatMount(unix.AT_FDCWD, m, both)
	if err != nil {
		t.Fatal(err)
	}
	if !root.Root || root.Mode != unix.S_IFDIR || root.Ino == 0 || root.Dev == 0 {
		t.Errorf("StatMount(%s) = %+v; want a directory that is a mount root", m, root)
	}
	if want := tableMountID(t, real); root.ID != want {
		t.Errorf("StatMount(%s).ID = %d; the mount table lists %d", m, root.ID, want)
	}
	if root.Key() == 0 || (root.UniqueID != 0 && root.Key() != root.UniqueID) {
		t.Errorf("StatMount(%s).Key() = %d for %+v", m, root.Key(), root)
	}

	sub, err := fsat.StatMount(unix.AT_FDCWD, filepath.Join(m, "sub"), fsat.MountKey)
	if err != nil {
		t.Fatal(err)
	}
	if sub.Root || sub.Key() != root.Key() || sub.Dev != root.Dev {
		t.Errorf("StatMount(sub) = %+v; want the mount root's mount (%+v), not a root", sub, root)
	}
	if sub.UniqueID == 0 && sub.ID != root.ID {
		t.Errorf("MountKey without unique IDs gave %d; want the classic ID %d", sub.ID, root.ID)
	}
	classic, err := fsat.StatMount(unix.AT_FDCWD, filepath.Join(m, "sub"), fsat.TableID)
	if err != nil || classic.ID != root.ID || classic.UniqueID != 0 {
		t.Errorf("StatMount(sub, TableID) = %+v, %v; want ID %d only", classic, err, root.ID)
	}
	if !root.SameMount(root) || sub.SameMount(root) {
		t.Errorf("SameMount: a mount root and a directory beneath it must differ (%+v, %+v)", root, sub)
	}

	fd, err := unix.Open(m, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	byFd, err := fsat.StatMount(fd, "", both)
	if err != nil || !byFd.SameMount(root) || byFd.Ino != root.Ino {
		t.Errorf("StatMount(fd) = %+v, %v; want %+v", byFd, err, root)
	}

	link, err := fsat.StatMount(unix.AT_FDCWD, filepath.Join(base, "link"), both)
	if err != nil || link.Mode != unix.S_IFLNK || link.Root {
		t.Errorf("StatMount(link) = %+v, %v; want the symlink itself, not its target", link, err)
	}

	usage, err := fsat.StatMount(fd, "", fsat.Usage)
	if err != nil || usage.Nlink == 0 || usage.ID != 0 || usage.UniqueID != 0 {
		t.Errorf("StatMount(fd, Usage) = %+v, %v; want a link count and no IDs", usage, err)
	}

	_, err = fsat.StatMount(unix.AT_FDCWD, filepath.Join(base, "missing"), both)
	if err != unix.ENOENT || !errors.Is(err, syscall.ENOENT) {
		t.Errorf("StatMount(missing) = %v; want ENOENT", err)
	}
}

// TestStatmountOf: statmount(2) names the mount StatMount's unique ID
// stands for (its mount point and classic ID, its propagation), and a
// mount that is gone is ENOENT.
func TestStatmountOf(t *testing.T) {
	mounttest.RequireMounts(t)
	m := filepath.Join(t.TempDir(), "m")
	mounttest.Build(t, filepath.Dir(m), "dir m")
	mounttest.Tmpfs(t, m, "size=64k")
	real, err := filepath.EvalSymlinks(m)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("", m, "", unix.MS_SHARED, ""); err != nil {
		t.Fatal(err)
	}
	s, err := fsat.StatMount(unix.AT_FDCWD, m, fsat.MountKey|fsat.TableID)
	if err != nil {
		t.Fatal(err)
	}
	if s.UniqueID == 0 {
		mounttest.Skip(t, "the kernel has no unique mount IDs (Linux < 6.8)")
	}
	got, err := fsat.StatmountOf(s.UniqueID)
	if errors.Is(err, fsat.ErrUnsupported) {
		mounttest.Skip(t, "the kernel has no statmount (Linux < 6.8)")
	}
	if err != nil {
		t.Fatal(err)
	}
	if got.MountPoint != real || got.ID != s.ID || got.UniqueID != s.UniqueID {
		t.Errorf("StatmountOf(%#x) = %+v; want mount point %s, ID %d", s.UniqueID, got, real, s.ID)
	}
	if got.Propagation&unix.MS_SHARED == 0 || got.PeerGroup == 0 {
		t.Errorf("StatmountOf(%#x) = %+v; want a shared mount with its peer group", s.UniqueID, got)
	}
	mounttest.Unmount(t, m)
	if _, err := fsat.StatmountOf(s.UniqueID); !errors.Is(err, unix.ENOENT) {
		t.Errorf("StatmountOf(%#x) after the unmount = %v; want ENOENT", s.UniqueID, err)
	}
}

// TestListMounts: every mount of the namespace, nested ones included, in
// increasing order, past the first answer's 512 IDs (a node with more
// mounts than one call returns).
func TestListMounts(t *testing.T) {
	mounttest.RequireMounts(t)
	top := filepath.Join(t.TempDir(), "top")
	mounttest.Build(t, filepath.Dir(top), "dir top")
	mounttest.Tmpfs(t, top, "size=64k")
	var want []uint64
	for i := range 600 {
		d := filepath.Join(top, strconv.Itoa(i))
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := unix.Mount("tmpfs", d, "tmpfs", 0, "size=4k"); err != nil {
			t.Fatal(err)
		}
		s, err := fsat.StatMount(unix.AT_FDCWD, d, fsat.MountKey)
		if err != nil {
			t.Fatal(err)
		}
		if s.UniqueID == 0 {
			mounttest.Skip(t, "the kernel has no unique mount IDs (Linux < 6.8)")
		}
		want = append(want, s.UniqueID)
	}
	t.Cleanup(func() {
		for i := range 600 {
			_ = unix.Unmount(filepath.Join(top, strconv.Itoa(i)), unix.MNT_DETACH)
		}
	})
	got, err := fsat.ListMounts()
	if errors.Is(err, fsat.ErrUnsupported) {
		mounttest.Skip(t, "the kernel has no listmount (Linux < 6.8)")
	}
	if err != nil {
		t.Fatal(err)
	}
	listed := map[uint64]bool{}
	for i, id := range got {
		if i > 0 && id <= got[i-1] {
			t.Fatalf("ListMounts: %#x after %#x; want increasing IDs", id, got[i-1])
		}
		listed[id] = true
	}
	for _, id := range want {
		if !listed[id] {
			t.Fatalf("ListMounts (%d IDs) lacks the nested mount %#x", len(got), id)
		}
	}
	b, err := os.ReadFile("/proc/thread-self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), "\n"); n != len(got) {
		t.Errorf("ListMounts: %d IDs; the mount table has %d lines", len(got), n)
	}
}
