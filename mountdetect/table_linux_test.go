package mountdetect

import (
	"path/filepath"
	"slices"
	"testing"

	"github.com/nodevol/nodevol/internal/mounttest"
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
