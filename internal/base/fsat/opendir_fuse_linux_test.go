package fsat_test

import (
	"errors"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nodevol/nodevol/internal/base/fsat"
	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
)

// TestMkdirAllRacesStalledFUSE: MkdirAll with SameMount (how SetUp makes
// and opens a pod's volume and metadata directories) looks at each
// component before it opens it, so that a filesystem mounted there, which
// may never answer, is refused and not opened. Whoever can mount in the
// pod directory mounts a FUSE directory whose daemon never answers on a
// component, and unmounts it, over and over: MkdirAll must never open it,
// whichever instant the mount appears, and so never block.
func TestMkdirAllRacesStalledFUSE(t *testing.T) {
	mounttest.RequireMounts(t)
	base := t.TempDir()
	mounttest.Build(t, base, "dir pod/plugins/vol", "dir stalled")
	stalled := filepath.Join(base, "stalled")
	mounttest.StalledFUSE(t, "stalled", stalled, "040000")
	target := filepath.Join(base, "pod", "plugins", "vol")
	d, err := fsat.OpenRoot(base)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	binds := mounttest.BindFlicker(stalled, target, nil)
	defer binds.Stop(t)
	const tries = 50000
	var opened, refused int
	// Past tries, until the attacker has met the calls often enough (a
	// loaded machine can starve its thread), for at most a minute.
	deadline := time.Now().Add(time.Minute)
	for i := 0; i < tries || (refused < 100 && time.Now().Before(deadline)); i++ {
		var returned atomic.Bool
		err := mounttest.Within(t, 5*time.Second, "MkdirAll through a directory a stalled FUSE is mounted on and off", func() error {
			defer returned.Store(true)
			dir, err := d.MkdirAll("pod/plugins/vol", 0o750, fsat.SameMount)
			if err == nil {
				dir.Close()
			}
			return err
		})
		if !returned.Load() {
			t.Fatalf("MkdirAll %d of %d blocked (after %d binds)", i+1, tries, binds.Count())
		}
		switch {
		case err == nil:
			opened++
		case errors.Is(err, fsat.ErrOtherMount):
			refused++
		default:
			t.Fatalf("MkdirAll %d of %d: %v", i+1, tries, err)
		}
	}
	t.Logf("%d opened, %d refused, %d binds", opened, refused, binds.Count())
	if refused == 0 {
		t.Error("no MkdirAll met the mount: the race was not tried")
	}
}
