package mountdetect

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
	"golang.org/x/sys/unix"
)

func TestMountTable(t *testing.T) {
	mounttest.RequireMounts(t)
	base := t.TempDir()
	vol := filepath.Join(base, "vol")
	mounttest.Build(t, base, "dir vol/sub", "file f x", "symlink alias vol")
	mounttest.Tmpfs(t, filepath.Join(vol, "a"), "")
	mounttest.Tmpfs(t, filepath.Join(vol, "a/b"), "")
	mounttest.Bind(t, filepath.Join(base, "f"), filepath.Join(vol, "sub/f"))
	mounttest.Tmpfs(t, filepath.Join(base, "vol-sibling"), "") // shares the prefix "vol", not beneath it
	mounttest.Tmpfs(t, filepath.Join(base, "vol0"), "")
	hp := filepath.Join(vol, "hp")
	mounttest.Mount(t, "nodev", hp, "hugetlbfs", 0, "pagesize=2M")

	tab, err := ReadMountTable()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{vol, filepath.Join(base, "alias"), filepath.Join(vol, "a")} {
		fromTable, err := tab.NestedMounts(p)
		if err != nil {
			t.Fatal(err)
		}
		direct, err := NestedMounts(p)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(mountPoints(fromTable), mountPoints(direct)) || len(direct) == 0 {
			t.Errorf("table.NestedMounts(%q) = %q; NestedMounts = %q", p, mountPoints(fromTable), mountPoints(direct))
		}
	}
	info, err := tab.Detect(hp)
	if err != nil || info.Magic != MagicHugetlbfs || !info.MountPoint || info.HugePageSize != 2<<20 {
		t.Errorf("table.Detect(hugetlbfs) = %+v, %v", info, err)
	}
}

// TestNilMountTable: a nil table is the kernel's table at the time of each
// question, and OrRead turns it into one read.
func TestNilMountTable(t *testing.T) {
	mounttest.RequireMounts(t)
	vol := filepath.Join(t.TempDir(), "vol")
	mounttest.Build(t, vol, "dir sub")
	mounttest.Tmpfs(t, filepath.Join(vol, "a"), "")

	var none *MountTable
	got, err := none.NestedMounts(vol)
	if err != nil || !slices.Equal(mountPoints(got), []string{filepath.Join(vol, "a")}) {
		t.Errorf("(*MountTable)(nil).NestedMounts(%q) = %q, %v; want [%s/a]", vol, mountPoints(got), err, vol)
	}
	fd, err := unix.Open(vol, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	at, beneath, err := none.MountsAtFile(fd, vol)
	if err != nil || len(at) != 0 || !slices.Equal(mountPoints(beneath), []string{filepath.Join(vol, "a")}) {
		t.Errorf("(*MountTable)(nil).MountsAtFile(%q) = %q, %q, %v; want [], [%s/a]", vol, mountPoints(at), mountPoints(beneath), err, vol)
	}

	tab, err := none.OrRead()
	if err != nil || tab == nil {
		t.Fatalf("(*MountTable)(nil).OrRead() = %v, %v; want a table", tab, err)
	}
	// A mount made after the read is not in that table, but is live.
	mounttest.Tmpfs(t, filepath.Join(vol, "sub"), "")
	if same, err := tab.OrRead(); same != tab || err != nil {
		t.Errorf("tab.OrRead() = %p, %v; want tab (%p)", same, err, tab)
	}
	if got, _ := tab.NestedMounts(vol); len(got) != 1 {
		t.Errorf("table read before the second mount: NestedMounts(%q) = %q; want only %s/a", vol, mountPoints(got), vol)
	}
	if got, _ := none.NestedMounts(vol); len(got) != 2 {
		t.Errorf("(*MountTable)(nil).NestedMounts(%q) after a second mount = %q; want both", vol, mountPoints(got))
	}
}

// TestMountsFromSource: a mount is found by its source wherever it is,
// after its directory was renamed too; a nil table finds nothing.
func TestMountsFromSource(t *testing.T) {
	mounttest.RequireMounts(t)
	base := t.TempDir()
	mounttest.Build(t, base, "dir a", "dir b")
	mounttest.Mount(t, "nodevol-test-source-1", filepath.Join(base, "a"), "tmpfs", 0, "size=1m")
	mounttest.Mount(t, "nodevol-test-source-1", filepath.Join(base, "b"), "tmpfs", 0, "size=1m")
	tab, err := ReadMountTable()
	if err != nil {
		t.Fatal(err)
	}
	found := tab.MountsFromSource("nodevol-test-source-1")
	var got []string
	for _, m := range found {
		got = append(got, m.MountPoint)
		if m.Root != "/" || m.ID == 0 {
			t.Errorf("%s: root %q, ID %d; want / and the mount's ID", m.MountPoint, m.Root, m.ID)
		}
	}
	if !slices.Equal(got, []string{filepath.Join(base, "a"), filepath.Join(base, "b")}) {
		t.Errorf("MountsFromSource = %q; want both mounts", got)
	}
	// A bind of a subdirectory keeps the source; its root says which part.
	mounttest.Build(t, base, "dir c", "dir a/sub")
	mounttest.Bind(t, filepath.Join(base, "a/sub"), filepath.Join(base, "c"))
	tab, err = ReadMountTable()
	if err != nil {
		t.Fatal(err)
	}
	roots := map[string]string{}
	for _, m := range tab.MountsFromSource("nodevol-test-source-1") {
		roots[m.MountPoint] = m.Root
	}
	if roots[filepath.Join(base, "c")] != "/sub" {
		t.Errorf("roots %v; want the bind of a/sub at c with root /sub", roots)
	}
	if m := tab.MountsFromSource("nodevol-test-source-none"); len(m) != 0 {
		t.Errorf("MountsFromSource of an unknown source = %v", m)
	}
	var none *MountTable
	if m := none.MountsFromSource("nodevol-test-source-1"); m != nil {
		t.Errorf("nil table: %v", m)
	}
}

// TestCompareWithDir checks the mount-point search's comparison with
// dir+"/" against the string it stands for, on names around '/' in
// byte order ('-' and '.' sort before it, '0' after).
func TestCompareWithDir(t *testing.T) {
	words := []string{"", "/", "/a", "/a/", "/a-", "/a.", "/a0", "/a/b", "/a//", "/ab", "/a-2/x", "/b", "/", "a", "/a/b/c"}
	for _, s := range words {
		for _, w := range words {
			dir := strings.TrimSuffix(w, "/")
			if got, want := compareWithDir(s, dir), strings.Compare(s, dir+"/"); got != want {
				t.Errorf("compareWithDir(%q, %q) = %d, want %d", s, dir, got, want)
			}
			if got, want := isBeneath(s, dir), strings.HasPrefix(s, dir+"/"); got != want {
				t.Errorf("isBeneath(%q, %q) = %v, want %v", s, dir, got, want)
			}
		}
	}
}
