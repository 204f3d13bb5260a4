package mountdetect

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
	"golang.org/x/sys/unix"
)

func raceIterations() int {
	if testing.Short() {
		return 20
	}
	return 150
}

func buildRaceTree(t *testing.T, vol string, dirs, files int) {
	t.Helper()
	for i := range dirs {
		for j := range files {
			mounttest.Build(t, vol, fmt.Sprintf("file d%d/sub/f%d x", i, j))
		}
	}
}

// TestRemoveAllRaceDirExchangedWithSymlink exchanges directories of the
// tree with a symlink to an outside sentinel directory (renameat2
// RENAME_EXCHANGE, the CVE-2022-21658 pattern) while RemoveAll runs.
// RemoveAll may fail, but the outside directory must stay byte-for-byte
// intact.
func TestRemoveAllRaceDirExchangedWithSymlink(t *testing.T) {
	var raced atomic.Int64
	for _, v := range variants(t) {
		t.Run(v.String(), func(t *testing.T) {
			base := mounttest.MemTempDir(t)
			outside := filepath.Join(base, "outside")
			snap := mounttest.Sentinels(t, outside)
			for it := range raceIterations() {
				vol := filepath.Join(base, fmt.Sprintf("vol%d", it))
				buildRaceTree(t, vol, 6, 8)
				var done atomic.Bool
				var wg sync.WaitGroup
				volfd, err := unix.Open(vol, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
				if err != nil {
					t.Fatal(err)
				}
				wg.Go(func() {
					// The attacker never resolves a path through the tree
					// (that would make it, not RemoveAll, follow the
					// symlink): every name is one element relative to a
					// directory fd opened with O_NOFOLLOW.
					defer unix.Close(volfd)
					for !done.Load() {
						_ = unix.Symlinkat(outside, volfd, "link")
						d := fmt.Sprintf("d%d", rand.IntN(6))
						if unix.Renameat2(volfd, d, volfd, "link", unix.RENAME_EXCHANGE) == nil {
							raced.Add(1)
						}
						dfd, err := unix.Openat(volfd, fmt.Sprintf("d%d", rand.IntN(6)), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
						if err == nil {
							_ = unix.Renameat2(dfd, "sub", volfd, "link", unix.RENAME_EXCHANGE)
							unix.Close(dfd)
						}
					}
				})
				err = RemoveAll(vol, v.opts()...)
				done.Store(true)
				wg.Wait()
				if errors.Is(err, ErrCrossesMount) {
					t.Errorf("iteration %d: RemoveAll reported a mount where there is none: %v", it, err)
				}
				mounttest.Intact(t, outside, snap)
				if err := RemoveAll(vol); err != nil {
					t.Fatalf("iteration %d: clean-up RemoveAll = %v", it, err)
				}
				if t.Failed() {
					return
				}
			}
		})
	}
	if raced.Load() == 0 {
		t.Error("no exchange ever succeeded: the test did not race")
	}
	t.Logf("%d successful exchanges during removals", raced.Load())
}

// TestRemoveAllRaceMountDuringWalk bind-mounts a tmpfs holding sentinels
// onto a random directory of the tree while RemoveAll runs.
func TestRemoveAllRaceMountDuringWalk(t *testing.T) {
	mounttest.RequireMounts(t)
	var refused, mountedAfter int
	for _, v := range variants(t) {
		t.Run(v.String(), func(t *testing.T) {
			base := mounttest.MemTempDir(t)
			nas := filepath.Join(base, "nas")
			mounttest.Tmpfs(t, nas, "size=1m")
			snap := mounttest.Sentinels(t, nas)
			for it := range raceIterations() {
				vol := filepath.Join(base, fmt.Sprintf("vol%d", it))
				buildRaceTree(t, vol, 6, 20)
				var target atomic.Value
				var wg sync.WaitGroup
				// The attacker starts when the walk enters its first
				// directory, so the mount lands during the walk rather than
				// before the pre-check (which the other tests cover).
				start := make(chan struct{})
				var once sync.Once
				testHookBeforeEnter = func(string) { once.Do(func() { close(start) }) }
				wg.Go(func() {
					<-start
					for range 1000 {
						d := filepath.Join(vol, fmt.Sprintf("d%d/sub", rand.IntN(6)))
						if unix.Mount(nas, d, "", unix.MS_BIND, "") == nil {
							target.Store(d)
							return
						}
					}
				})
				err := RemoveAll(vol, v.opts()...)
				once.Do(func() { close(start) })
				wg.Wait()
				testHookBeforeEnter = nil
				if err != nil {
					var cm *CrossesMountError
					if !errors.As(err, &cm) || !cm.DuringWalk {
						t.Errorf("iteration %d: RemoveAll = %v; want nil or a mount found during the walk", it, err)
					}
					refused++
				}
				mounttest.Intact(t, nas, snap)
				if d, ok := target.Load().(string); ok {
					mountedAfter++
					mounttest.Intact(t, d, snap)
					if err := unix.Unmount(d, unix.MNT_DETACH); err != nil {
						t.Fatal(err)
					}
				}
				if err := RemoveAll(vol); err != nil {
					t.Fatalf("iteration %d: clean-up RemoveAll = %v", it, err)
				}
				if t.Failed() {
					return
				}
			}
		})
	}
	t.Logf("mount landed in %d iterations, RemoveAll reported it in %d", mountedAfter, refused)
}
