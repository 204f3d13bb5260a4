package cli

// "nodevol scan" in an agent's mount namespace must not make the
// kubelet's unmounts fail: the agent's copy of a volume's mount (a peer
// with a Bidirectional mount of the kubelet root, a slave with
// HostToContainer) is counted by the kernel when the kubelet unmounts the
// original, and any descriptor on the copy's root makes umount2 fail with
// EBUSY.

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
)

// propagatedRoot makes base a shared tmpfs and starts the "kubelet", a
// thread in a mount namespace of its own whose copy of base is a peer of
// the test's (Bidirectional) or, with slave, the master of the test's
// copy (HostToContainer). The test's namespace plays the agent's.
func propagatedRoot(t *testing.T, base string, slave bool) *mounttest.NamespaceThread {
	t.Helper()
	mounttest.Tmpfs(t, base, "size=16m")
	if err := unix.Mount("", base, "", unix.MS_SHARED, ""); err != nil {
		t.Fatal(err)
	}
	kubelet := mounttest.StartPeer(t)
	if slave {
		if err := unix.Mount("", base, "", unix.MS_SLAVE, ""); err != nil {
			t.Fatal(err)
		}
	}
	return kubelet
}

// TestHeldDescriptorOnPropagatedCopyMakesUnmountBusy is the kernel's
// behaviour the scan is written around: while a descriptor (O_PATH
// included) is open on the root of the agent's propagated copy of a
// mount, the kubelet's umount2 of the original fails with EBUSY; with
// the descriptor closed it succeeds. A descriptor on the directory above
// the mount (the plugin directory) does not pin it.
func TestHeldDescriptorOnPropagatedCopyMakesUnmountBusy(t *testing.T) {
	mounttest.RequireMounts(t)
	for _, slave := range []bool{false, true} {
		name := "peer (Bidirectional)"
		if slave {
			name = "slave (HostToContainer)"
		}
		t.Run(name, func(t *testing.T) {
			base := filepath.Join(mounttest.RealTempDir(t), "kubelet")
			kubelet := propagatedRoot(t, base, slave)
			vol := filepath.Join(base, "kubernetes.io~secret", "token")
			if err := os.MkdirAll(vol, 0o755); err != nil {
				t.Fatal(err)
			}
			mount := func() {
				var err error
				kubelet.Do(func() { err = unix.Mount("tmpfs", vol, "tmpfs", 0, "size=1m") })
				if err != nil {
					t.Fatalf("kubelet's mount: %v", err)
				}
				if !mounttest.IsMountRoot(t, vol) {
					t.Fatal("the kubelet's mount did not propagate into the agent's namespace")
				}
			}
			unmount := func() (err error) {
				kubelet.Do(func() { err = unix.Unmount(vol, 0) })
				return err
			}
			for _, held := range []struct {
				what  string
				path  string
				flags int
				busy  bool
			}{
				{"O_PATH on the copy's root", vol, unix.O_PATH, true},
				{"O_RDONLY on the copy's root", vol, unix.O_RDONLY | unix.O_DIRECTORY, true},
				{"O_PATH on the plugin directory above it", filepath.Dir(vol), unix.O_PATH, false},
			} {
				mount()
				fd, err := unix.Open(held.path, held.flags|unix.O_CLOEXEC, 0)
				if err != nil {
					t.Fatal(err)
				}
				err = unmount()
				unix.Close(fd)
				switch {
				case held.busy && !errors.Is(err, unix.EBUSY):
					t.Errorf("%s: the kubelet's umount2 = %v; want EBUSY", held.what, err)
				case !held.busy && err != nil:
					t.Errorf("%s: the kubelet's umount2 = %v; want success", held.what, err)
				}
				if err != nil {
					if err := unmount(); err != nil {
						t.Fatalf("%s: umount2 after the descriptor was closed: %v", held.what, err)
					}
				}
			}
		})
	}
}

// TestScanDoesNotMakeUnmountsBusy: the kubelet mounts and unmounts the
// volumes of other plugins (secret, configmap, projected, a CSI target)
// and a tmpfs on an emptyDir
// over and over while scans run in the agent's namespace; none of its
// unmounts may fail because the scan holds a descriptor on those volumes'
// roots (the kubelet retries, but a teardown that failed is logged as an
// error and delays the pod's deletion): the scan looks at them by a statx
// of the name and answers from the mount table. The statx itself holds
// the mount for the system call's duration; that window is bounded here
// (at most 1 % of the unmounts, each succeeding when retried), where the
// descriptors failed about 3 %, each retried hundreds of times.
func TestScanDoesNotMakeUnmountsBusy(t *testing.T) {
	mounttest.RequireMounts(t)
	cycles := 2000
	if testing.Short() {
		cycles = 300
	}
	for _, slave := range []bool{false, true} {
		name := "peer (Bidirectional)"
		if slave {
			name = "slave (HostToContainer)"
		}
		t.Run(name, func(t *testing.T) {
			root := filepath.Join(mounttest.RealTempDir(t), "kubelet")
			kubelet := propagatedRoot(t, root, slave)
			vols := filepath.Join(root, "pods", testUID, "volumes")
			rels := []string{
				"kubernetes.io~secret/token",
				"kubernetes.io~configmap/config",
				"kubernetes.io~projected/kube-api-access-x",
				"kubernetes.io~csi/pv/mount",
				// A tmpfs on an emptyDir (with no record here: the plan
				// refuses it, but looks at it as at a Memory volume's).
				"kubernetes.io~empty-dir/memory",
				"kubernetes.io~empty-dir/cache", // not mounted: a Default emptyDir beside them
			}
			for _, rel := range rels {
				if err := os.MkdirAll(filepath.Join(vols, rel), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			mounted := rels[:5]
			var (
				stop          atomic.Bool
				scans, failed atomic.Int64
				wg            sync.WaitGroup
			)
			wg.Add(1)
			go func() {
				defer wg.Done()
				for !stop.Load() {
					if _, err := scanRoot(root); err != nil {
						failed.Add(1)
					}
					scans.Add(1)
				}
			}()
			var busy, retries, unmounts int
			var problem error
			// Each cycle mounts every volume, lets a whole scan see them
			// mounted (the scan loop runs on), then unmounts them one by
			// one as the kubelet does, retrying on EBUSY.
			kubelet.Do(func() {
				for i := 0; i < cycles/len(mounted) && problem == nil; i++ {
					for _, rel := range mounted {
						if err := unix.Mount("tmpfs", filepath.Join(vols, rel), "tmpfs", 0, "size=1m"); err != nil {
							problem = err
							return
						}
					}
					for seen := scans.Load(); scans.Load() < seen+2 && !stop.Load(); {
						runtime.Gosched()
					}
					for _, rel := range mounted {
						failedOnce := false
						for {
							err := unix.Unmount(filepath.Join(vols, rel), 0)
							if err == nil {
								break
							}
							if !errors.Is(err, unix.EBUSY) {
								problem = err
								return
							}
							if !failedOnce {
								busy++
							}
							failedOnce = true
							retries++ // the kubelet retries
						}
						unmounts++
					}
				}
			})
			stop.Store(true)
			wg.Wait()
			if problem != nil {
				t.Fatalf("the kubelet's mounts: %v", problem)
			}
			if failed.Load() > 0 {
				t.Errorf("%d of %d scans failed", failed.Load(), scans.Load())
			}
			if scans.Load() < 10 {
				t.Errorf("only %d scans ran during %d unmounts: the race was not exercised", scans.Load(), unmounts)
			}
			// What is left is the statx of each volume's name: the kernel
			// holds the mount while the system call runs, a microsecond,
			// and the kubelet's next try succeeds. A descriptor held on
			// the volume's root (as the scan held one through its whole
			// examination) failed about 3 % of these unmounts, each
			// hundreds of times.
			if busy*100 > unmounts {
				t.Errorf("%d of the kubelet's %d unmounts failed with EBUSY (%d times in all) while %d scans ran; want at most 1 %%", busy, unmounts, retries, scans.Load())
			}
			t.Logf("%d unmounts, %d failed with EBUSY (%d EBUSY in all, retried), %d scans", unmounts, busy, retries, scans.Load())
		})
	}
}
