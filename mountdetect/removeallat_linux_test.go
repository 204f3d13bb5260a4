package mountdetect

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
	"golang.org/x/sys/unix"
)

// openDirFd opens the directory dir with flags (O_RDONLY or O_PATH) and
// closes it in Cleanup (the RemoveAllAt tests check that it was left
// open).
func openDirFd(t *testing.T, dir string, flags int) int {
	t.Helper()
	fd, err := unix.Open(dir, flags|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}

// stillOpen fails the test unless fd is still an open descriptor of a
// directory: RemoveAllAt must not close the caller's dirfd.
func stillOpen(t *testing.T, fd int) {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
		t.Errorf("dirfd %d after RemoveAllAt: fstat = %v (mode %o); want the caller's directory, still open", fd, err, st.Mode)
	}
}

func TestRemoveAllAtRemovesTree(t *testing.T) {
	forEachVariant(t, func(t *testing.T, v variant) {
		for _, flags := range []int{unix.O_RDONLY, unix.O_PATH} {
			base := t.TempDir()
			outside := filepath.Join(base, "outside")
			snap := mounttest.Sentinels(t, outside)
			mounttest.Build(t, base,
				"file pods/vol/a.txt hello",
				"file pods/vol/d1/d2/f deep",
				"symlink pods/vol/out "+outside,
				"file pods/sibling keep",
			)
			dirfd := openDirFd(t, filepath.Join(base, "pods"), flags)
			path := "/display/pods/vol"
			if err := RemoveAllAt(dirfd, "vol", path, v.opts()...); err != nil {
				t.Fatalf("RemoveAllAt(%d, vol, %q) = %v; want nil", dirfd, path, err)
			}
			mustNotExist(t, filepath.Join(base, "pods/vol"))
			if _, err := os.Stat(filepath.Join(base, "pods/sibling")); err != nil {
				t.Errorf("sibling of the removed entry: %v", err)
			}
			mounttest.Intact(t, outside, snap)
			stillOpen(t, dirfd)
			// A missing name is success, and a symlink or file is unlinked.
			if err := RemoveAllAt(dirfd, "vol", path, v.opts()...); err != nil {
				t.Errorf("RemoveAllAt of a missing name = %v; want nil", err)
			}
			if err := RemoveAllAt(dirfd, "sibling", "/display/pods/sibling", v.opts()...); err != nil {
				t.Errorf("RemoveAllAt of a file = %v; want nil", err)
			}
			mustNotExist(t, filepath.Join(base, "pods/sibling"))
		}
	})
}

func TestRemoveAllAtInvalidName(t *testing.T) {
	base := t.TempDir()
	mounttest.Build(t, base, "file a/b/keep k", "file keep k")
	snap := mounttest.Snapshot(t, base)
	dirfd := openDirFd(t, base, unix.O_RDONLY)
	const path = "/display/entry"
	for _, name := range []string{"a/b", "a/", "/a", "..", ".", "", "a\x00b"} {
		err := RemoveAllAt(dirfd, name, path)
		var ipe *InvalidPathError
		if !errors.Is(err, ErrInvalidPath) || !errors.As(err, &ipe) || ipe.Path != path || ipe.Reason == "" {
			t.Errorf("RemoveAllAt(%q, %q) = %v; want *InvalidPathError naming %s with a reason", name, path, err, path)
		}
	}
	mounttest.Intact(t, base, snap)
	stillOpen(t, dirfd)
}

// TestRemoveAllAtRefusesNestedMount: the pre-check works from the opened
// entry, refuses before touching anything, and names the entry and the
// mount as the caller does.
func TestRemoveAllAtRefusesNestedMount(t *testing.T) {
	requireMounts(t)
	forEachVariant(t, func(t *testing.T, v variant) {
		base := t.TempDir()
		mounttest.Build(t, base, "file pods/vol/top t", "file pods/vol/a/mid m")
		nas := filepath.Join(base, "pods/vol/a/nas")
		mounttest.Tmpfs(t, nas, "size=1m")
		mounttest.Sentinels(t, nas)
		before := mounttest.Snapshot(t, base)
		dirfd := openDirFd(t, filepath.Join(base, "pods"), unix.O_RDONLY)
		const path = "/display/pods/vol"
		err := RemoveAllAt(dirfd, "vol", path, v.opts()...)
		cm := crossing(t, err)
		if cm.Path != path || cm.DuringWalk {
			t.Errorf("CrossesMountError Path = %q, DuringWalk = %v; want %q, false", cm.Path, cm.DuringWalk, path)
		}
		if got, want := mountPoints(cm.Mounts), []string{path + "/a/nas"}; !slices.Equal(got, want) {
			t.Errorf("mounts = %q; want %q (the caller's naming)", got, want)
		}
		if strings.Contains(err.Error(), "/proc/self/fd") || strings.Contains(err.Error(), base) {
			t.Errorf("error %q names the entry otherwise than as %s", err, path)
		}
		mounttest.Intact(t, base, before)
		stillOpen(t, dirfd)
	})
}

// TestRemoveAllAtErrorsNamePath: every error of the walk names the entry
// as path, also for mounts that appear during the walk.
func TestRemoveAllAtErrorsNamePath(t *testing.T) {
	requireMounts(t) // a tmpfs that supports the immutable flag
	forEachVariant(t, func(t *testing.T, v variant) {
		base := t.TempDir()
		mounttest.Tmpfs(t, base, "")
		mounttest.Build(t, base, "file pods/vol/a/locked x", "file pods/vol/a/free y", "file pods/vol/b/target/f z")
		locked := filepath.Join(base, "pods/vol/a/locked")
		mounttest.SetImmutable(t, locked, true)
		t.Cleanup(func() { mounttest.SetImmutable(t, locked, false) })
		nas := filepath.Join(t.TempDir(), "nas")
		mounttest.Tmpfs(t, nas, "")
		snap := mounttest.Sentinels(t, nas)
		const path = "/display/pods/vol"
		target := filepath.Join(base, "pods/vol/b/target")
		testHookBeforeEnter = func(p string) {
			if p == path+"/b/target" {
				mounttest.Bind(t, nas, target)
			}
		}
		t.Cleanup(func() { testHookBeforeEnter = nil })
		dirfd := openDirFd(t, filepath.Join(base, "pods"), unix.O_RDONLY)
		err := RemoveAllAt(dirfd, "vol", path, v.opts()...)
		testHookBeforeEnter = nil
		var pe *os.PathError
		if !errors.As(err, &pe) || pe.Path != path+"/a/locked" || !errors.Is(err, unix.EPERM) {
			t.Errorf("RemoveAllAt = %v; want EPERM naming %s/a/locked", err, path)
		}
		cm := crossing(t, err)
		if got, want := mountPoints(cm.Mounts), []string{path + "/b/target"}; !slices.Equal(got, want) || !cm.DuringWalk || cm.Path != path {
			t.Errorf("CrossesMountError = %+v; want Path %s, mounts %q, DuringWalk", cm, path, want)
		}
		if strings.Contains(err.Error(), "/proc/self/fd") || strings.Contains(err.Error(), base) {
			t.Errorf("error %q names the entry otherwise than as %s", err, path)
		}
		mounttest.Intact(t, nas, snap)
		mustNotExist(t, filepath.Join(base, "pods/vol/a/free"))
		stillOpen(t, dirfd)
	})
}

// TestRemoveAllAtRenamedParent: the entry is found through dirfd, not a
// name: after the directory open as dirfd is renamed, RemoveAllAt removes
// the entry at its new place, and its pre-check still sees a nested mount.
func TestRemoveAllAtRenamedParent(t *testing.T) {
	forEachVariant(t, func(t *testing.T, v variant) {
		base := t.TempDir()
		mounttest.Build(t, base, "file pods/vol/f x", "file pods/vol/d/g y")
		dirfd := openDirFd(t, filepath.Join(base, "pods"), unix.O_PATH)
		if err := os.Rename(filepath.Join(base, "pods"), filepath.Join(base, "moved")); err != nil {
			t.Fatal(err)
		}
		// The old name now leads somewhere else, which must stay.
		mounttest.Build(t, base, "file pods/vol/decoy keep")
		snap := mounttest.Snapshot(t, filepath.Join(base, "pods"))
		path := filepath.Join(base, "pods/vol")
		if err := RemoveAllAt(dirfd, "vol", path, v.opts()...); err != nil {
			t.Fatalf("RemoveAllAt = %v; want nil", err)
		}
		mustNotExist(t, filepath.Join(base, "moved/vol"))
		mounttest.Intact(t, filepath.Join(base, "pods"), snap)
		stillOpen(t, dirfd)
	})
	t.Run("nested mount", func(t *testing.T) {
		requireMounts(t)
		forEachVariant(t, func(t *testing.T, v variant) {
			base := t.TempDir()
			mounttest.Build(t, base, "file pods/vol/f x")
			nas := filepath.Join(base, "pods/vol/nas")
			mounttest.Tmpfs(t, nas, "")
			mounttest.Sentinels(t, nas)
			dirfd := openDirFd(t, filepath.Join(base, "pods"), unix.O_RDONLY)
			if err := os.Rename(filepath.Join(base, "pods"), filepath.Join(base, "moved")); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = unix.Unmount(filepath.Join(base, "moved/vol/nas"), unix.MNT_DETACH) })
			before := mounttest.Snapshot(t, base)
			path := filepath.Join(base, "pods/vol")
			cm := crossing(t, RemoveAllAt(dirfd, "vol", path, v.opts()...))
			if got, want := mountPoints(cm.Mounts), []string{path + "/nas"}; !slices.Equal(got, want) || cm.DuringWalk {
				t.Errorf("mounts = %q, DuringWalk = %v; want %q, false", got, cm.DuringWalk, want)
			}
			mounttest.Intact(t, base, before)
		})
	})
}
