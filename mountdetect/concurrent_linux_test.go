package mountdetect

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
)

// TestRemoveAllDirRemovedUnderneath: a directory the walk has opened is
// removed by someone else before the walk lists it (getdents64 on a
// removed directory fails with ENOENT). It is gone, which is what was
// asked: no error. When its name is then taken by a symlink to an outside
// directory, the symlink is removed and never followed.
func TestRemoveAllDirRemovedUnderneath(t *testing.T) {
	forEachVariant(t, func(t *testing.T, v variant) {
		for _, swap := range []bool{false, true} {
			base := t.TempDir()
			vol := filepath.Join(base, "vol")
			outside := filepath.Join(base, "outside")
			mounttest.Build(t, vol, "file a/b/c x", "file a/d y", "file z z")
			mounttest.Build(t, outside, "file keep precious")
			snap := mounttest.Snapshot(t, outside)
			victim := filepath.Join(vol, "a")
			testHookAfterEnter = func(p string) {
				if p != victim {
					return
				}
				if err := os.RemoveAll(victim); err != nil {
					t.Errorf("remove %s underneath: %v", victim, err)
				}
				if swap {
					if err := os.Symlink(outside, victim); err != nil {
						t.Errorf("symlink: %v", err)
					}
				}
			}
			t.Cleanup(func() { testHookAfterEnter = nil })
			err := RemoveAll(vol, v.opts()...)
			testHookAfterEnter = nil
			if err != nil {
				t.Errorf("swap=%v: RemoveAll = %v; want nil (the directory removed underneath is gone)", swap, err)
			}
			mustNotExist(t, vol)
			mounttest.Intact(t, outside, snap)
		}
	})
}

// TestRemoveAllConcurrent: several RemoveAll calls on one tree (Go's
// TestRemoveAllRace) all succeed: what another call removed first is gone,
// not an error.
func TestRemoveAllConcurrent(t *testing.T) {
	forEachVariant(t, func(t *testing.T, v variant) {
		for range 10 {
			root := filepath.Join(t.TempDir(), "vol")
			var specs []string
			for _, p := range []string{"a/a/a", "a/a/b", "a/b/a", "a/b/b", "b/a/a", "b/a/b", "b/b/a", "b/b/b"} {
				specs = append(specs, "dir "+p+"/x/y", "file "+p+"/f f")
			}
			mounttest.Build(t, root, specs...)
			start := make(chan struct{})
			var wg sync.WaitGroup
			for range 4 {
				wg.Go(func() {
					<-start
					if err := RemoveAll(root, v.opts()...); err != nil {
						t.Errorf("RemoveAll = %v; want nil", err)
					}
				})
			}
			close(start)
			wg.Wait()
			mustNotExist(t, root)
		}
	})
}

// TestRemoveAllConcurrentDeep: several RemoveAll calls on one tree deeper
// than the fd window (maxOpen 4): a directory removed by another call
// while this one had evicted it, or was inside it, is reached again
// through ".." of a removed child (a dead directory) and found gone, not
// "moved". Every call succeeds and nothing outside is touched.
func TestRemoveAllConcurrentDeep(t *testing.T) {
	forEachVariant(t, func(t *testing.T, v variant) {
		v.maxOpen = 4
		for i := range 20 {
			base := t.TempDir()
			root := filepath.Join(base, "vol")
			outside := filepath.Join(base, "outside")
			mounttest.Build(t, outside, "file keep precious")
			snap := mounttest.Snapshot(t, outside)
			var specs []string
			for _, b := range []string{"a", "b", "c"} {
				deep := strings.Repeat(b+"/", 12)
				specs = append(specs, "dir "+deep+"x/y", "file "+deep+"f f", "symlink "+deep+"l "+outside)
			}
			mounttest.Build(t, root, specs...)
			start := make(chan struct{})
			var wg sync.WaitGroup
			for g := range 4 {
				wg.Go(func() {
					<-start
					if err := RemoveAll(root, v.opts()...); err != nil {
						t.Errorf("iteration %d, caller %d: RemoveAll = %v; want nil", i, g, err)
					}
				})
			}
			close(start)
			wg.Wait()
			mustNotExist(t, root)
			mounttest.Intact(t, outside, snap)
			if t.Failed() {
				return
			}
		}
	})
}

// TestRemoveAllStartRemovedUnderneath: the start directory is removed by
// someone else (another RemoveAll of the same path) just after this call
// opened it, before its mount checks. Nothing is at the path any more:
// RemoveAll succeeds, for every strategy (with openat2, the mount-root
// check of the start looks at it by name, and found nothing there).
func TestRemoveAllStartRemovedUnderneath(t *testing.T) {
	forEachVariant(t, func(t *testing.T, v variant) {
		vol := filepath.Join(t.TempDir(), "vol")
		mounttest.Build(t, vol, "file a/b x", "file c y")
		testHookAfterOpenStart = func(p string) {
			if p != vol {
				return
			}
			if err := os.RemoveAll(vol); err != nil {
				t.Errorf("remove %s underneath: %v", vol, err)
			}
		}
		defer func() { testHookAfterOpenStart = nil }()
		if err := RemoveAll(vol, v.opts()...); err != nil {
			t.Errorf("RemoveAll = %v; want nil (the start directory was removed underneath)", err)
		}
		mustNotExist(t, vol)
	})
}
