package mountdetect

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
	"golang.org/x/sys/unix"
)

// TestRemoveAllAliasBindMounts: the volume's filesystem is bind-mounted a
// second time (base/alias shows what base/fs shows), and a mount is made
// through that second path. The mount table lists it under base/alias, not
// under the volume's path, yet its mount point is a directory (or file) of
// the volume: walking the volume enters the covered directory and ends in
// EBUSY. The pre-check must find it by filesystem position, refuse up
// front (DuringWalk false) and delete nothing. NestedMounts, the
// MountTable's answers and RemoveAll must agree.
func TestRemoveAllAliasBindMounts(t *testing.T) {
	requireMounts(t)
	type tc struct {
		name   string
		shared bool // base/fs and base/alias are peers: mounts propagate
		// prepare mounts through alias (base/alias/vol) and returns the
		// mount points RemoveAll must report.
		prepare func(t *testing.T, base, alias string) []string
	}
	cases := []tc{
		{"tmpfs on a subdirectory", false, func(t *testing.T, base, alias string) []string {
			sub := filepath.Join(alias, "a/sub")
			mounttest.Tmpfs(t, sub, "")
			mounttest.Sentinels(t, sub)
			return []string{sub}
		}},
		{"tmpfs and one inside it", false, func(t *testing.T, base, alias string) []string {
			sub := filepath.Join(alias, "a/sub")
			mounttest.Tmpfs(t, sub, "")
			inner := filepath.Join(sub, "inner")
			mounttest.Tmpfs(t, inner, "")
			mounttest.Sentinels(t, inner)
			return []string{sub, inner}
		}},
		{"bind-mounted file", false, func(t *testing.T, base, alias string) []string {
			mounttest.Build(t, base, "file secret.conf do not delete me")
			dst := filepath.Join(alias, "a/secret.conf")
			mounttest.Bind(t, filepath.Join(base, "secret.conf"), dst)
			return []string{dst}
		}},
		{"tmpfs on the directory itself", false, func(t *testing.T, base, alias string) []string {
			mounttest.Tmpfs(t, alias, "")
			mounttest.Sentinels(t, alias)
			return []string{alias}
		}},
		{"shared peers: the mount propagates", true, func(t *testing.T, base, alias string) []string {
			sub := filepath.Join(alias, "a/sub")
			mounttest.Tmpfs(t, sub, "")
			mounttest.Sentinels(t, sub)
			return []string{filepath.Join(base, "fs/vol/a/sub"), sub}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			forEachVariant(t, func(t *testing.T, v variant) {
				base := t.TempDir()
				mounttest.Tmpfs(t, base, "")
				if c.shared {
					if err := unix.Mount("", base, "", unix.MS_SHARED, ""); err != nil {
						t.Fatal(err)
					}
				}
				vol := filepath.Join(base, "fs/vol")
				mounttest.Build(t, vol, "file top.txt t", "file a/mid.txt m", "file a/sub/covered c", "file a/secret.conf placeholder")
				mounttest.Bind(t, filepath.Join(base, "fs"), filepath.Join(base, "alias"))
				want := c.prepare(t, base, filepath.Join(base, "alias/vol"))
				slices.Sort(want)
				before := mounttest.Snapshot(t, base)

				nested, err := NestedMounts(vol)
				if err != nil {
					t.Fatal(err)
				}
				tab, err := ReadMountTable()
				if err != nil {
					t.Fatal(err)
				}
				tabNested, err := tab.NestedMounts(vol)
				if err != nil {
					t.Fatal(err)
				}
				fd, err := unix.Open(vol, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
				if err != nil {
					t.Fatal(err)
				}
				at, beneath, err := tab.MountsAtFile(fd, vol)
				unix.Close(fd)
				if err != nil {
					t.Fatal(err)
				}
				for name, got := range map[string][]Mount{"NestedMounts": nested, "MountTable.NestedMounts": tabNested, "MountTable.MountsAtFile": append(at, beneath...)} {
					if g := mountPoints(got); !slices.Equal(g, want) {
						t.Errorf("%s(%s) = %q; want %q", name, vol, g, want)
					}
				}

				err = RemoveAll(vol, v.opts()...)
				cm := crossing(t, err)
				if cm.DuringWalk {
					t.Errorf("DuringWalk = true; want the mounts found before removal (err: %v)", err)
				}
				if got := mountPoints(cm.Mounts); !slices.Equal(got, want) {
					t.Errorf("mounts = %q; want %q", got, want)
				}
				mounttest.Intact(t, base, before)
				if _, err := os.Stat(filepath.Join(vol, "top.txt")); err != nil {
					t.Errorf("a refusal deleted: %v", err)
				}
			})
		})
	}
}
