package fsquota

import (
	"path/filepath"
	"sync"
	"testing"

	"github.com/nodevol/nodevol/internal/base/testhook"
)

// mapKernel is a testhook.QuotaKernel in memory.
type mapKernel struct {
	mu     sync.Mutex
	limits map[uint32]int64
}

func (k *mapKernel) Limit(id uint32) (int64, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.limits[id], nil
}

func (k *mapKernel) SetLimit(id uint32, hard int64) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if hard == 0 {
		delete(k.limits, id)
	} else {
		k.limits[id] = hard
	}
	return nil
}

// errCrash is what a crashHook panics with: the test's stand-in for the
// process dying at a point (the deferred unlock runs, as the kernel drops
// a dead process's flock).
type errCrash struct{ at testhook.Point }

// crashAt returns a hook that panics at p for path.
func crashAt(p testhook.Point, path string) testhook.Hook {
	return func(at testhook.Point, got string) {
		if at == p && got == path {
			panic(errCrash{at})
		}
	}
}

// crashed runs fn and reports whether it stopped at a crashAt point.
func crashed(t *testing.T, fn func() error) bool {
	t.Helper()
	stopped := false
	func() {
		defer func() {
			if r := recover(); r != nil {
				if _, ok := r.(errCrash); !ok {
					panic(r)
				}
				stopped = true
			}
		}()
		if err := fn(); err != nil {
			t.Fatal(err)
		}
	}()
	return stopped
}

// TestTestKernelAndCrashPoints: with withTestKernel, Assign and Clear keep
// limits in the test's kernel; each crash point is reached, and what an
// Assign or Clear stopped there leaves, a new Manager's Clear releases
// completely — the other project untouched — so that the ID is handed out
// again.
func TestTestKernelAndCrashPoints(t *testing.T) {
	root := xfsDir(t)
	for _, tc := range []struct {
		at     testhook.Point
		assign bool // stop in Assign (else in Clear)
	}{
		{testhook.QuotaRecorded, true},
		{testhook.QuotaUntagged, false},
	} {
		t.Run(string(tc.at), func(t *testing.T) {
			k := &mapKernel{limits: map[uint32]int64{}}
			bk := newBookkeeping(t)
			opts := []Option{WithProjectsFile(bk.projects), WithProjidFile(bk.projid), Enforce(), withTestKernel(k)}
			other := mkdir(t, filepath.Join(root, string(tc.at)+"-other"))
			dir := mkdir(t, filepath.Join(root, string(tc.at)))
			m := paths(New(opts...))
			if id, err := m.Assign(other, 2<<20); err != nil || id != FirstProjectID || k.limits[id] != 2<<20 {
				t.Fatalf("Assign = %d, %v, limit %d; want %d with a 2 MiB limit in the kernel stand-in", id, err, k.limits[id], FirstProjectID)
			}
			otherProjects, otherProjid := bk.read(t)
			crashing := paths(New(append(opts, withTestHook(crashAt(tc.at, dir)))...))
			if tc.assign {
				if !crashed(t, func() error { _, err := crashing.Assign(dir, 1<<20); return err }) {
					t.Fatalf("Assign never reached %s", tc.at)
				}
				if p, _ := bk.read(t); !containsPath(p, dir) || mustProjectID(t, dir) != 0 {
					t.Fatalf("at %s: projects = %q, tag %d; want %s recorded and not tagged", tc.at, p, mustProjectID(t, dir), dir)
				}
			} else {
				if _, err := m.Assign(dir, 1<<20); err != nil {
					t.Fatal(err)
				}
				if !crashed(t, func() error { return crashing.Clear(dir) }) {
					t.Fatalf("Clear never reached %s", tc.at)
				}
				if p, _ := bk.read(t); !containsPath(p, dir) || mustProjectID(t, dir) != 0 || k.limits[FirstProjectID+1] != 0 {
					t.Fatalf("at %s: projects = %q, tag %d, limits %v; want %s recorded, untagged, without limit", tc.at, p, mustProjectID(t, dir), k.limits, dir)
				}
			}
			// A new process clears what is left.
			if err := paths(New(opts...)).Clear(dir); err != nil {
				t.Fatal(err)
			}
			if p, q := bk.read(t); p != otherProjects || q != otherProjid || len(k.limits) != 1 || k.limits[FirstProjectID] != 2<<20 {
				t.Errorf("after Clear: projects %q, projid %q, limits %v; want only the other project (%q, %q, 2 MiB)", p, q, k.limits, otherProjects, otherProjid)
			}
			if got, err := paths(New(opts...)).Assign(dir, 0); err != nil || got != FirstProjectID+1 {
				t.Errorf("Assign after the clean-up = %d, %v; want %d, free again", got, err, FirstProjectID+1)
			}
		})
	}
}

func containsPath(projects, path string) bool {
	for _, l := range parseProjects(projects).lines {
		if l.ok && l.path == path {
			return true
		}
	}
	return false
}
