package mountdetect

// A FUSE filesystem whose daemon never answers, met by the walk: DiskUsage
// and RemoveAll return without asking it anything.

import (
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

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

// TestRemoveAllStartRacesStalledFUSE: a stalled FUSE directory bound on
// RemoveAll's start directory and off again, over and over, while
// RemoveAll runs (nodevol rm PATH, which an attacker who can write above
// PATH can race). Between its fstatat and its open of the start directory
// by name, the open reached the FUSE and blocked for good; the start is
// now opened O_PATH, checked, and reopened from that descriptor. Each
// RemoveAll must return: the tree removed, or refused as a mount.
func TestRemoveAllStartRacesStalledFUSE(t *testing.T) {
	mounttest.RequireMounts(t)
	base := t.TempDir()
	start := filepath.Join(base, "start")
	stalled := filepath.Join(base, "stalled")
	mounttest.Build(t, base, "dir stalled")
	stalledFUSE(t, stalled, "040000")
	baseFD, err := unix.Open(base, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(baseFD)
	binds := mounttest.BindFlicker(stalled, start, nil)
	defer binds.Stop(t)
	const tries = 5000
	// Past tries, until the attacker has met the calls often enough (a
	// loaded machine can starve its thread), for at most a minute.
	deadline := time.Now().Add(time.Minute)
	for i := 0; i < tries || (binds.Count() < 1000 && time.Now().Before(deadline)); i++ {
		// mkdirat, not a stat or MkdirAll of the path, which would ask
		// the FUSE when it is bound there.
		if err := unix.Mkdirat(baseFD, "start", 0o755); err != nil && err != unix.EEXIST {
			t.Fatal(err)
		}
		var returned atomic.Bool
		_ = mounttest.Within(t, hangWait, "RemoveAll with a stalled FUSE bound on and off its start directory", func() error {
			defer returned.Store(true)
			return RemoveAll(start)
		})
		if !returned.Load() {
			t.Fatalf("RemoveAll %d of %d blocked (after %d binds)", i+1, tries, binds.Count())
		}
	}
	t.Logf("%d RemoveAlls, %d binds", tries, binds.Count())
	if binds.Count() == 0 {
		t.Error("no bind mount was made: the race was not tried")
	}
}
