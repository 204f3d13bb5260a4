package mountdetect

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"golang.org/x/sys/unix"

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
