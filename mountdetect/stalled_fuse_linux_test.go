package mountdetect

// A FUSE filesystem whose daemon never answers, met by the walk: DiskUsage
// and RemoveAll return without asking it anything.

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
)

func stalledFUSE(t *testing.T, target, rootmode string) {
	mounttest.StalledFUSE(t, "stalled", target, rootmode)
}

func within5s(t *testing.T, what string, fn func() error) {
	t.Helper()
	t.Logf("%s = %v", what, mounttest.Within(t, hangWait, what, fn))
}

// TestDiskUsageStalledFUSEOnFile: FUSE mounts on regular files too
// (rootmode=0100000; getdents shows the underlying file's DT_REG). A
// stalled FUSE file mount inside a Default volume must not hang DiskUsage
// (hence emptydir's Usage, which walks a Default volume without refusing
// mounts beneath it first): the walk looks at every entry, not only at
// subdirectories, with statx AT_STATX_DONT_SYNC.
func TestDiskUsageStalledFUSEOnFile(t *testing.T) {
	mounttest.RequireMounts(t)
	vol := filepath.Join(t.TempDir(), "vol")
	mounttest.Build(t, vol, "file f x", "file g y")
	stalledFUSE(t, filepath.Join(vol, "f"), "0100000")
	within5s(t, "DiskUsage", func() error { _, err := DiskUsage(vol); return err })
}

// TestRemoveAllFoundMountStalledFUSE: a stalled FUSE mount appears in the
// volume during the walk. RemoveAll (hence TearDown) meets it, opens it
// O_PATH to name it, and returns without asking it anything (no fstatfs,
// which would be a FUSE_STATFS request); the same holds for a mount met as
// a file, as an EBUSY unlink or as a mounted root.
func TestRemoveAllFoundMountStalledFUSE(t *testing.T) {
	mounttest.RequireMounts(t)
	forEachVariant(t, func(t *testing.T, v variant) {
		vol := filepath.Join(t.TempDir(), "vol")
		mounttest.Build(t, vol, "file a/b/f x", "file z z")
		target := filepath.Join(vol, "a/b")
		testHookBeforeEnter = func(p string) {
			if p == target {
				stalledFUSE(t, target, "040000")
			}
		}
		t.Cleanup(func() { testHookBeforeEnter = nil })
		within5s(t, "RemoveAll", func() error { return RemoveAll(vol, v.opts()...) })
	})
}

var hangWait = 5 * time.Second // the wait before a call counts as hung
