package reconciler

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"testing/synctest"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodevol/nodevol/internal/base/fsat"
	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
)

// TestPodDirCleanupNeverFollowsASwap: between the last teardown of a pod
// and the removal of its directory, whoever can write into the pods
// directory swaps pods/<uid> for a symlink to data outside the kubelet
// root, or mounts a filesystem on it. The cleanup must not list, rmdir or
// remove anything there: it is reached by descriptor, without following a
// symlink, and must be on the pods directory's mount. The pod stays, the
// removal wait says why, and the data is intact byte for byte.
func TestPodDirCleanupNeverFollowsASwap(t *testing.T) {
	for _, tc := range []struct {
		name string
		swap func(t *testing.T, podDir, outside string)
		want error
	}{
		{"symlink", func(t *testing.T, podDir, outside string) {
			if err := os.Rename(podDir, podDir+".moved"); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(outside, podDir); err != nil {
				t.Fatal(err)
			}
		}, fsat.ErrSymlink},
		{"mount", func(t *testing.T, podDir, outside string) {
			mounttest.Mount(t, outside, podDir, "", unix.MS_BIND, "")
		}, fsat.ErrOtherMount},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.name == "mount" {
				mounttest.RequireMounts(t)
			}
			synctest.Test(t, func(t *testing.T) {
				outside := t.TempDir() // outside the kubelet root
				mounttest.Build(t, outside,
					"dir volumes/kubernetes.io~empty-dir",
					"file plugins/kubernetes.io~empty-dir/cache/ready ",
					"file volume-subpaths/cache/ctr/0/keep data",
					"file etc-passwd root:x:0:0",
				)
				mounttest.Sentinels(t, filepath.Join(outside, "data"))
				snap := mounttest.Snapshot(t, outside)

				e := startManager(t, t.TempDir(), Options{})
				podDir, _ := e.layout.PodDir("p")
				e.plugin.afterTearDown = func() { tc.swap(t, podDir, outside) }
				e.m.MarkSourcesReady()
				if err := e.m.AddPod(pod("p", "cache")); err != nil {
					t.Fatal(err)
				}
				if err := e.m.WaitForMount(waitCtx(t, 10*time.Second), "p"); err != nil {
					t.Fatal(err)
				}
				e.m.RemovePod("p")
				err := e.m.WaitForPodRemoval(waitCtx(t, time.Minute), "p")
				if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, tc.want) {
					t.Errorf("WaitForPodRemoval = %v; want a timeout with %v", err, tc.want)
				}
				mounttest.Intact(t, outside, snap)
			})
		})
	}
}
