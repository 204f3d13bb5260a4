package emptydir

import (
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
	"github.com/nodevol/nodevol/volume"
)

// writePending writes a nodevol.json claiming a Memory-medium volume whose
// mount an embedder's mounter was making: a pending record with only the
// source, the type and the directory under the mount (under, stat before
// the mount).
func writePending(t *testing.T, metaDir, source string, under unix.Stat_t) {
	t.Helper()
	writeForged(t, metaDir, &mountRecord{FSType: "tmpfs", Source: source, DirDev: under.Dev, DirIno: under.Ino, Pending: true})
}

// TestPendingMountRecord: a pending record (SetUp through an embedder's
// mounter stopped between the mount and recording its IDs) proves a mount
// by its source alone, so that the next SetUp adopts it and TearDown
// removes it — and proves nothing else: another source, another type, two
// mounts stacked or a share bind-mounted there are refused, the mounts
// and their data left byte for byte.
func TestPendingMountRecord(t *testing.T) {
	mounttest.RequireMounts(t)
	source := sourceFor("00112233445566ff", testUID, "cache")
	for _, tc := range []struct {
		name   string
		mount  func(t *testing.T, vol string) // what is mounted on the volume directory
		proven bool
	}{
		{"its tmpfs", func(t *testing.T, vol string) { mounttest.Mount(t, source, vol, "tmpfs", 0, "size=1m") }, true},
		{"a tmpfs of another nodevol source", func(t *testing.T, vol string) {
			mounttest.Mount(t, sourceFor("aaaaaaaaaaaaaaaa", testUID, "cache"), vol, "tmpfs", 0, "size=1m")
		}, false},
		{"a ramfs of its source", func(t *testing.T, vol string) { mounttest.Mount(t, source, vol, "ramfs", 0, "") }, false},
		{"its tmpfs twice, stacked", func(t *testing.T, vol string) {
			mounttest.Mount(t, source, vol, "tmpfs", 0, "size=1m")
			mounttest.Mount(t, source, vol, "tmpfs", 0, "size=1m")
		}, false},
		{"a share bind-mounted", func(t *testing.T, vol string) {
			share := filepath.Join(filepath.Dir(filepath.Dir(filepath.Dir(vol))), "share")
			mounttest.Tmpfs(t, share, "size=1m")
			mounttest.Bind(t, share, vol)
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := t.TempDir()
			e := newEnv(t, filepath.Join(base, "kubelet"), nil)
			vol := e.setUp(t, e.pod(emptyDirSpec("cache", "")), "cache").Path()
			var under unix.Stat_t
			if err := unix.Lstat(vol, &under); err != nil {
				t.Fatal(err)
			}
			tc.mount(t, vol)
			want := mounttest.Sentinels(t, vol)
			writePending(t, e.metaDir(t, "cache"), source, under)

			plan, err := e.plugin.PlanTearDown(testUID, "cache", nil)
			if err != nil {
				t.Fatal(err)
			}
			if proven := plan.Action == ActionUnmountAndRemove; proven != tc.proven {
				t.Fatalf("PlanTearDown = %v (%s); want proven the volume's own: %v", plan.Action, plan.Reason, tc.proven)
			}
			if !tc.proven {
				if err := e.tearDown("cache"); err == nil {
					t.Fatal("TearDown succeeded; want a refusal")
				}
				mounttest.Intact(t, vol, want)
				if !mounttest.IsMountRoot(t, vol) {
					t.Error("the refused mount was unmounted")
				}
				return
			}
			// The next SetUp adopts the mount and records its IDs.
			pod := e.pod(volume.Spec{Name: "cache", EmptyDir: &volume.EmptyDirSource{Medium: "Memory", SizeLimit: 1 << 20}})
			e.setUp(t, pod, "cache")
			got := mounttest.Snapshot(t, vol)
			if got["."] != "dtrwxrwxrwx" {
				t.Errorf("adopted mount's root has mode %s; want SetUp's dtrwxrwxrwx (a Memory volume's 01777)", got["."])
			}
			delete(got, ".")
			delete(want, ".")
			for k, v := range want {
				if got[k] != v {
					t.Errorf("adopting the mount changed %s: %q, was %q", k, got[k], v)
				}
			}
			md, err := readMetadata(e.metaDir(t, "cache"))
			pinned := identityOf(t, vol)
			pinned.FSType, pinned.Source, pinned.DirDev, pinned.DirIno = "tmpfs", source, under.Dev, under.Ino
			if err != nil || md == nil || md.Mount == nil || *md.Mount != *pinned {
				t.Fatalf("metadata after SetUp = %+v (mount %+v), %v; want the mount's identity recorded, no longer pending: %+v", md, md.Mount, err, pinned)
			}
			// TearDown proves a pending record's mount the same way.
			writePending(t, e.metaDir(t, "cache"), source, under)
			if err := e.tearDown("cache"); err != nil {
				t.Fatal(err)
			}
			mustNotExist(t, vol)
			mustNotExist(t, e.metaDir(t, "cache"))
		})
	}
}
