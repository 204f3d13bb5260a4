package emptydir

import (
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
	"github.com/nodevol/nodevol/volume"
)

// TestAdoptionRenameRace: while SetUp looks at a volume directory, whoever
// can write into pod directories keeps exchanging the pod's plugin
// directory with another pod's, whose volume has the stock kubelet's
// tmpfs (made before nodevol started, its sentinel files in it). SetUp can
// then open the other pod's tmpfs through this volume's name and find it
// back in its own place when it reads the mount table. It must never
// adopt it: a mount is adopted only when it was on this volume's directory
// when nodevol started. The volume's own directory holds a tmpfs of a
// source of its own, which is never adopted either, so that every SetUp
// tries adoption and none sets the volume up.
func TestAdoptionRenameRace(t *testing.T) {
	n := newStockNode(t)
	dir := n.volumeDir(t, testUID, PluginName, "cache", "cache")
	mounttest.Mount(t, "nas", dir, "tmpfs", 0, "size=64k")
	other := n.volumeDir(t, victimUID, PluginName, "cache", "cache")
	mounttest.Tmpfs(t, other, "size=1m")
	want := mounttest.Sentinels(t, other)
	e, reg := n.nodevol(t)
	pod := memoryPod(e)
	m, err := e.plugin.NewMounter(pod.Volume("cache"), pod)
	if err != nil {
		t.Fatal(err)
	}
	// The attacker's namespace is private: neither directory is a mount
	// point there, so it can exchange the volume directories themselves.
	var swaps atomic.Int64
	a := mounttest.StartAttacker(t, func() error {
		if err := mounttest.Exchange(unix.AT_FDCWD, filepath.Dir(other), filepath.Dir(dir)); err != nil {
			return err
		}
		swaps.Add(1)
		return nil
	})
	a.Resume()
	const tries = 3000
	// Past tries, until the attacker has met the calls often enough (a
	// loaded machine can starve its thread), for at most a minute.
	deadline := time.Now().Add(time.Minute)
	for i := 0; i < tries || (swaps.Load() < tries && time.Now().Before(deadline)); i++ {
		if err := m.SetUp(e.ctx, volume.MounterArgs{}); err == nil {
			a.Pause()
			t.Fatalf("SetUp %d of %d (after %d exchanges) set the volume up", i+1, tries, swaps.Load())
		}
		if got := adoptedCount(t, reg); got != 0 {
			a.Pause()
			rec, _ := readMetadata(e.metaDir(t, "cache"))
			t.Fatalf("SetUp %d of %d (after %d exchanges) adopted a mount: record %+v", i+1, tries, swaps.Load(), rec)
		}
	}
	a.Pause()
	// Put the directories back (from the test's namespace, the plugin
	// directories are not mount points themselves).
	if mounttest.IsMountRoot(t, other) && !sameMount(t, other, want) {
		if err := mounttest.Exchange(unix.AT_FDCWD, filepath.Dir(other), filepath.Dir(dir)); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d SetUps, %d exchanges", tries, swaps.Load())
	if swaps.Load() < tries/10 {
		t.Errorf("only %d exchanges during %d SetUps: the race was hardly tried", swaps.Load(), tries)
	}
	mounttest.Intact(t, other, want)
}

// sameMount reports whether dir holds the sentinel files want.
func sameMount(t *testing.T, dir string, want map[string]string) bool {
	t.Helper()
	got := mounttest.Snapshot(t, dir)
	for k := range want {
		if _, ok := got[k]; !ok {
			return false
		}
	}
	return true
}
