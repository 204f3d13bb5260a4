package mountdetect

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nodevol/nodevol/internal/base/fsat"
	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
)

// TestChangesSince: ChangesSince names a mount made through a second bind
// mount of a filesystem at both of its paths, a mount made inside it
// under the paths of the mount it is in, a mount whose directory was
// renamed (no watch of the table fires for that) at its old and new mount
// points, a mount removed, and nothing when nothing changed.
func TestChangesSince(t *testing.T) {
	requireMounts(t)
	base := t.TempDir()
	mounttest.Tmpfs(t, base, "")
	fs, alias := filepath.Join(base, "fs"), filepath.Join(base, "alias")
	mounttest.Build(t, fs, "dir vol/a", "dir vol/d1", "dir vol/d2")
	mounttest.Bind(t, fs, alias)
	read := func() *MountTable {
		t.Helper()
		tab, err := ReadMountTable()
		if err != nil {
			t.Fatal(err)
		}
		return tab
	}
	only := func(changes []MountChange) MountChange {
		t.Helper()
		if len(changes) != 1 {
			t.Fatalf("changes = %+v; want one", changes)
		}
		return changes[0]
	}
	has := func(what string, paths []string, want ...string) {
		t.Helper()
		for _, w := range want {
			if !slices.Contains(paths, w) {
				t.Errorf("%s = %q; want %s among them", what, paths, w)
			}
		}
	}

	t0 := read()
	if c := read().ChangesSince(t0); len(c) != 0 {
		t.Fatalf("changes with nothing changed = %+v; want none", c)
	}
	nas := filepath.Join(alias, "vol/a")
	mounttest.Tmpfs(t, nas, "")
	t1 := read()
	c := only(t1.ChangesSince(t0))
	has("Paths of a mount made through the alias", c.Paths, nas, filepath.Join(fs, "vol/a"))

	inner := filepath.Join(nas, "inner")
	if err := os.Mkdir(inner, 0o755); err != nil {
		t.Fatal(err)
	}
	mounttest.Tmpfs(t, inner, "")
	t2 := read()
	c = only(t2.ChangesSince(t1))
	has("Paths of a mount inside it", c.Paths, inner)
	has("Within of a mount inside it", c.Within, nas, filepath.Join(fs, "vol/a"))

	m := filepath.Join(fs, "vol/d1/m")
	if err := os.Mkdir(m, 0o755); err != nil {
		t.Fatal(err)
	}
	mounttest.Tmpfs(t, m, "")
	t3 := read()
	if err := unix.Renameat2(unix.AT_FDCWD, filepath.Join(fs, "vol/d1"), unix.AT_FDCWD, filepath.Join(fs, "vol/d2"), unix.RENAME_EXCHANGE); err != nil {
		t.Fatal(err)
	}
	c = only(read().ChangesSince(t3))
	has("Paths of a mount whose directory was renamed", c.Paths, m, filepath.Join(fs, "vol/d2/m"))
	if err := unix.Renameat2(unix.AT_FDCWD, filepath.Join(fs, "vol/d1"), unix.AT_FDCWD, filepath.Join(fs, "vol/d2"), unix.RENAME_EXCHANGE); err != nil {
		t.Fatal(err)
	}

	if c := read().ChangesSince(t1); len(c) != 2 {
		t.Errorf("changes since before the inner mount and the renamed one = %+v; want those two", c)
	}
	c = only(t1.ChangesSince(t2)) // from t2 to t1: the inner mount went
	has("Paths of a mount removed", c.Paths, inner)
}

// TestChangesSinceSeesSameLineReplacement: a tmpfs unmounted and another
// mounted in its place, with the same source and options, gets the same
// classic ID, device number and line in the table (the kernel hands out
// the lowest free ones); ChangesSince still names it, by its new unique
// mount ID.
func TestChangesSinceSeesSameLineReplacement(t *testing.T) {
	requireMounts(t)
	if _, err := fsat.ListMounts(); errors.Is(err, fsat.ErrUnsupported) {
		mounttest.Skip(t, "the kernel cannot list unique mount IDs (listmount, Linux 6.8)")
	}
	base := t.TempDir()
	mounttest.Tmpfs(t, base, "")
	vol := filepath.Join(base, "vol")
	mounttest.Build(t, base, "dir vol")
	if err := unix.Mount("nv-0123abcd-4567ef89", vol, "tmpfs", 0, "size=64k"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(vol, unix.MNT_DETACH) })
	for try := 0; ; try++ {
		if try == 100 {
			t.Fatalf("the kernel never gave the tmpfs replacing the one on %s the same line", vol)
		}
		t0, err := ReadMountTable()
		if err != nil {
			t.Fatal(err)
		}
		if _, kept := mounttest.ReplaceKeepingLine(t, vol, "nv-0123abcd-4567ef89", "tmpfs", 0, "size=64k"); !kept {
			continue
		}
		t1, err := ReadMountTable()
		if err != nil {
			t.Fatal(err)
		}
		changes := t1.ChangesSince(t0)
		if len(changes) != 1 || changes[0].MountPoint != vol || !slices.Contains(changes[0].Paths, vol) {
			t.Fatalf("changes after replacing the tmpfs on %s with one of the same line = %+v; want that mount", vol, changes)
		}
		return
	}
}
