package fsat_test

import (
	"errors"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nodevol/nodevol/internal/base/fsat"
	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
)

// TestReadFileRacesStalledFUSE: ReadFile reads metadata in pod
// directories, where whoever can mount (a container with Bidirectional
// propagation) can put a file of a FUSE filesystem whose daemon never
// answers on the name at any instant, between any two system calls. An
// open of that file waits for the daemon forever; ReadFile must never
// open it, whichever instant the mount appears: it returns the file's
// content or an error, and never blocks.
func TestReadFileRacesStalledFUSE(t *testing.T) {
	mounttest.RequireMounts(t)
	base := t.TempDir()
	mounttest.Build(t, base, "file meta/nodevol.json {}", "file stalled ")
	stalled := filepath.Join(base, "stalled")
	mounttest.StalledFUSE(t, "stalled", stalled, "0100000")
	target := filepath.Join(base, "meta", "nodevol.json")
	d, err := fsat.OpenRoot(filepath.Join(base, "meta"))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	binds := mounttest.BindFlicker(stalled, target, nil)
	defer binds.Stop(t)
	const tries = 20000
	var read, refused int
	// Past tries, until the attacker has met the calls often enough (a
	// loaded machine can starve its thread), for at most a minute.
	deadline := time.Now().Add(time.Minute)
	for i := 0; i < tries || (refused < 100 && time.Now().Before(deadline)); i++ {
		var returned atomic.Bool
		err := mounttest.Within(t, 5*time.Second, "ReadFile of a name a stalled FUSE file is mounted on and off", func() error {
			b, err := d.ReadFile("nodevol.json", 1<<10)
			if err == nil && string(b) != "{}" {
				err = errors.New("read " + string(b))
			}
			returned.Store(true)
			return err
		})
		if !returned.Load() {
			t.Fatalf("ReadFile %d of %d blocked (after %d binds)", i+1, tries, binds.Count())
		}
		switch {
		case err == nil:
			read++
		case errors.Is(err, fsat.ErrOtherMount):
			refused++
		default:
			t.Fatalf("ReadFile %d of %d: %v", i+1, tries, err)
		}
	}
	t.Logf("%d reads, %d refusals, %d binds", read, refused, binds.Count())
	if refused == 0 {
		t.Error("no ReadFile met the mount: the race was not tried")
	}
	// The attacker stops first: a stat of the name while it binds the
	// stalled file there would wait for the FUSE daemon for good.
	binds.Stop(t)
	if _, err := os.Stat(target); err != nil {
		t.Fatal(err)
	}
}
