package subpath

import (
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nodevol/nodevol/emptydir"
	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
)

// TestCheckDoesNotAskStalledFUSE: the executor and the CLI ask
// subpath.Check before an emptyDir teardown, so Check must not ask a
// stalled FUSE mount anything either: on the volume directory, on
// volume-subpaths/<vol> (which the attacker can create, the pod directory
// being theirs), on a container directory or on an <index> entry, it
// returns without an O_RDONLY open (FUSE_OPENDIR) or a statx without
// AT_STATX_DONT_SYNC (FUSE_GETATTR).
func TestCheckDoesNotAskStalledFUSE(t *testing.T) {
	mounttest.RequireMounts(t)
	for _, where := range []string{"volume", "volume-subpaths/<vol>", "container", "index"} {
		t.Run(where, func(t *testing.T) {
			e := newEnv(t)
			mounttest.Build(t, e.subDir, "dir app/0")
			var target string
			switch where {
			case "volume":
				target = e.volDir
			case "volume-subpaths/<vol>":
				target = e.subDir
			case "container":
				target = filepath.Join(e.subDir, "app")
			case "index":
				target = filepath.Join(e.subDir, "app/0")
			}
			mounttest.StalledFUSE(t, "stalled", target, "040000")
			err := mounttest.Within(t, 5*time.Second, "subpath Check with a stalled FUSE mount on the "+where, func() error {
				return e.cleaner.Check(e.ctx, uid, emptydir.PluginName, "data")
			})
			t.Logf("Check = %v", err)
		})
	}
}

// TestCheckRacesStalledFUSE: the stalled FUSE directory is mounted on
// volume-subpaths/<vol> and unmounted, over and over, while Check runs:
// whichever instant the mount appears, Check never opens it, and so never
// blocks.
func TestCheckRacesStalledFUSE(t *testing.T) {
	mounttest.RequireMounts(t)
	e := newEnv(t)
	mounttest.Build(t, e.subDir, "dir app/0")
	stalled := filepath.Join(e.base, "stalled")
	mounttest.Build(t, e.base, "dir stalled")
	mounttest.StalledFUSE(t, "stalled", stalled, "040000")
	binds := mounttest.BindFlicker(stalled, e.subDir, nil)
	defer binds.Stop(t)
	const tries = 20000
	// Past tries, until the attacker has met the calls often enough (a
	// loaded machine can starve its thread), for at most a minute.
	deadline := time.Now().Add(time.Minute)
	for i := 0; i < tries || (binds.Count() < 1000 && time.Now().Before(deadline)); i++ {
		var returned atomic.Bool
		_ = mounttest.Within(t, 5*time.Second, "subpath Check with a stalled FUSE mounted on and off volume-subpaths/<vol>", func() error {
			defer returned.Store(true)
			return e.cleaner.Check(e.ctx, uid, emptydir.PluginName, "data")
		})
		if !returned.Load() {
			t.Fatalf("Check %d of %d blocked (after %d binds)", i+1, tries, binds.Count())
		}
	}
	t.Logf("%d Checks, %d binds", tries, binds.Count())
	if binds.Count() == 0 {
		t.Error("no bind mount was made: the race was not tried")
	}
}
