package mountdetect

// Findings of the second adversarial review of issue 10 (attacking the
// FUSE no-hang fix of 480ff39). Each test failed on the code before its fix.

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/nodevol/nodevol/internal/mounttest"
)

func stalledFUSE(t *testing.T, target, rootmode string) {
	mounttest.StalledFUSE(t, "stalled", target, rootmode)
}

func within5s(t *testing.T, what string, fn func() error) {
	t.Helper()
	t.Logf("%s = %v", what, mounttest.Within(t, reviewWait, what, fn))
}

// TestDiskUsageStalledFUSEOnFile: the walk looks at a
// subdirectory with statx AT_STATX_DONT_SYNC before opening it, but a
// non-directory entry is statx'd with STATX_TYPE|INO|NLINK|BLOCKS and no
// AT_STATX_DONT_SYNC. FUSE mounts on regular files too (rootmode=0100000;
// getdents shows the underlying file's DT_REG): a stalled FUSE file mount
// inside a Default volume hangs DiskUsage, hence emptydir's Usage, which
// walks a Default volume without refusing mounts beneath it first.
func TestDiskUsageStalledFUSEOnFile(t *testing.T) {
	mounttest.RequireMounts(t)
	vol := filepath.Join(t.TempDir(), "vol")
	mounttest.Build(t, vol, "file f x", "file g y")
	stalledFUSE(t, filepath.Join(vol, "f"), "0100000")
	within5s(t, "DiskUsage", func() error { _, err := DiskUsage(vol); return err })
}

// TestRemoveAllFoundMountStalledFUSE: when the walk meets a mount
// (openDir says crossed, without asking it anything), foundMount opens
// it O_PATH and then calls fstatfs on it to name its type — fstatfs is a
// FUSE_STATFS request. A stalled FUSE mount appearing in the volume during
// the walk (or met as a file, an EBUSY unlink, a root that is mounted)
// hangs RemoveAll, hence TearDown.
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

var reviewWait = 5 * time.Second // the wait before a call counts as hung
