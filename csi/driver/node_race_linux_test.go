package driver

// The node service against a pod that swaps names while its volume is
// published and unpublished.

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
)

// TestSwapVolumeDirsRace: the pod exchanges its CSI volume
// directory x (this driver's) with y (another driver's, whose target
// y/mount is a NAS) in a loop, while x is published and unpublished
// thousands of times, both media. The NAS must stay mounted and intact
// byte for byte; every unpublish either succeeds or refuses.
func TestSwapVolumeDirsRace(t *testing.T) {
	mounttest.RequireMounts(t)
	iterations := 1500
	if testing.Short() {
		iterations = 100
	}
	for _, medium := range []string{"Default", "Memory"} {
		t.Run(medium, func(t *testing.T) {
			e := newNodeEnv(t)
			_, tx := e.vol(t, testPodUID, "x")
			py, ty := e.vol(t, testPodUID, "y")
			nas := t.TempDir()
			mounttest.Sentinels(t, nas)
			if err := os.Mkdir(ty, 0o750); err != nil {
				t.Fatal(err)
			}
			mounttest.Bind(t, nas, ty)
			// and a second NAS deeper in y's volume
			nas2 := filepath.Join(ty, "deep")
			if err := os.Mkdir(nas2, 0o750); err != nil {
				t.Fatal(err)
			}
			mounttest.Tmpfs(t, nas2, "size=1m")
			snap2 := mounttest.Sentinels(t, nas2)
			snap := mounttest.Snapshot(t, ty) // both NAS
			nasID := mounttest.UniqueMountID(t, ty)
			csiDir := filepath.Dir(py)
			fd, err := unix.Open(csiDir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer unix.Close(fd)
			a := mounttest.StartAttacker(t, func() error { return mounttest.Exchange(fd, "x", "y") })
			var ok, refused, other int
			for i := 0; i < iterations; i++ {
				a.Resume()
				_, perr := e.d.NodePublishVolume(e.ctx, pubReq(testPodUID, tx, AttrMedium, medium))
				_, uerr := e.d.NodeUnpublishVolume(e.ctx, unpubReq(tx))
				a.Pause()
				switch c := status.Code(uerr); {
				case uerr == nil && perr == nil:
					ok++
				case c == codes.FailedPrecondition:
					refused++
				default:
					other++
					if other < 5 {
						t.Logf("iteration %d: publish %v; unpublish %v", i, perr, uerr)
					}
				}
				// The NAS must be where it was mounted, whatever the names.
				for _, n := range []string{"x", "y"} {
					p := filepath.Join(csiDir, n, "mount")
					if mounttest.IsMountRoot(t, p) && mounttest.UniqueMountID(t, p) == nasID {
						mounttest.Intact(t, p, snap)
						mounttest.Intact(t, filepath.Join(p, "deep"), snap2)
					}
				}
				if t.Failed() {
					t.Fatalf("iteration %d: the NAS changed", i)
				}
			}
			// Put y back in place and check the NAS mounts are both there.
			if _, err := os.Lstat(filepath.Join(csiDir, "y", "mount", "deep")); err != nil {
				if err := mounttest.Exchange(fd, "x", "y"); err != nil {
					t.Fatal(err)
				}
			}
			if !mounttest.IsMountRoot(t, ty) || !mounttest.IsMountRoot(t, filepath.Join(ty, "deep")) {
				t.Fatal("a NAS was unmounted")
			}
			mounttest.Intact(t, ty, snap)
			mounttest.Intact(t, filepath.Join(ty, "deep"), snap2)
			// Once the pod stops, the volume must go: no tmpfs of ours left.
			if _, err := e.d.NodeUnpublishVolume(e.ctx, unpubReq(tx)); err != nil {
				t.Errorf("unpublish after the attack: %v", err)
			}
			if _, err := os.Lstat(tx); !os.IsNotExist(err) {
				t.Errorf("x/mount left after the final unpublish (mounted: %v)", mounttest.IsMountRoot(t, tx))
				_ = unix.Unmount(tx, unix.MNT_DETACH)
			}
			t.Logf("%d iterations: %d published and unpublished, %d refused, %d other errors; %d swaps", iterations, ok, refused, other, a.Steps())
		})
	}
}

// TestSwapTargetRace: the pod exchanges the target x/mount with a
// NAS mount point (decoy) or with a symlink to outside data (link), and
// kubernetes.io~csi with a symlink to an outside tree, while x is
// published and unpublished in a loop. Nothing outside, and no NAS, may
// change.
func TestSwapTargetRace(t *testing.T) {
	mounttest.RequireMounts(t)
	iterations := 1000
	if testing.Short() {
		iterations = 100
	}
	for _, medium := range []string{"Default", "Memory"} {
		t.Run(medium, func(t *testing.T) {
			e := newNodeEnv(t)
			px, tx := e.vol(t, testPodUID, "x")
			outside := t.TempDir()
			mounttest.Sentinels(t, filepath.Join(outside, "x", "mount"))
			outSnap := mounttest.Snapshot(t, outside)
			if err := os.Symlink(outside, filepath.Join(px, "link")); err != nil {
				t.Fatal(err)
			}
			csiDir := filepath.Dir(px)
			pvols := filepath.Dir(csiDir)
			if err := os.Symlink(outside, filepath.Join(pvols, "csilink")); err != nil {
				t.Fatal(err)
			}
			xfd, err := unix.Open(px, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer unix.Close(xfd)
			vfd, err := unix.Open(pvols, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer unix.Close(vfd)
			var n int
			a := mounttest.StartAttacker(t, func() error {
				n++
				switch n % 3 {
				case 0:
					return mounttest.Exchange(xfd, "mount", "decoy")
				case 1:
					return mounttest.Exchange(xfd, "mount", "link")
				}
				return mounttest.Exchange(vfd, "kubernetes.io~csi", "csilink")
			})
			// The NAS is mounted after the attacker started: not a mount
			// point in its namespace, so it can rename it.
			decoy := filepath.Join(px, "decoy")
			if err := os.Mkdir(decoy, 0o750); err != nil {
				t.Fatal(err)
			}
			nas := t.TempDir()
			mounttest.Sentinels(t, nas)
			mounttest.Bind(t, nas, decoy)
			nasSnap := mounttest.Snapshot(t, decoy)
			nasID := mounttest.UniqueMountID(t, decoy)
			var ok, failed int
			for i := 0; i < iterations; i++ {
				a.Resume()
				_, perr := e.d.NodePublishVolume(e.ctx, pubReq(testPodUID, tx, AttrMedium, medium))
				_, uerr := e.d.NodeUnpublishVolume(e.ctx, unpubReq(tx))
				a.Pause()
				if perr == nil && uerr == nil {
					ok++
				} else {
					failed++
				}
				mounttest.Intact(t, outside, outSnap)
				p, found := mounttest.MountPointOfUnique(t, nasID)
				if !found {
					// The attacker, in a mount namespace where these
					// directories are not mount points, exchanged the
					// NAS's directory into the target's name between the
					// last check of the volume's own mount and umount2:
					// emptydir pins the target's directory for the
					// unmount, so that no rename reaches it then.
					t.Fatalf("iteration %d: the NAS was unmounted (unpublish: %v)", i, uerr)
				}
				mounttest.Intact(t, p, nasSnap)
				if t.Failed() {
					t.Fatalf("iteration %d: changed", i)
				}
			}
			// After the attack: the NAS as it was; then every mount left
			// under x is detached — the NAS wherever its directory went,
			// and a tmpfs of ours an exchange left under another name
			// (the refusals name where it is, and an operator unmounts
			// it) — the names are put back, and the unpublish succeeds.
			if p, found := mounttest.MountPointOfUnique(t, nasID); found {
				mounttest.Intact(t, p, nasSnap)
			}
			restored := true
			if fi, err := os.Lstat(filepath.Join(pvols, "csilink")); err == nil && fi.IsDir() {
				if err := mounttest.Exchange(vfd, "kubernetes.io~csi", "csilink"); err != nil {
					t.Logf("putting kubernetes.io~csi back: %v", err)
					restored = false
				}
			}
			// Only now is everything under x again (with the names of
			// kubernetes.io~csi and csilink exchanged it is not).
			detachUnder(px)
			if fi, err := os.Lstat(filepath.Join(px, "link")); err == nil && fi.Mode()&os.ModeSymlink == 0 {
				if err := mounttest.Exchange(xfd, "mount", "link"); err != nil {
					// A detached mount's directory can stay busy for a
					// moment: the names stay exchanged.
					t.Logf("putting mount and link back: %v", err)
					restored = false
				}
			}
			_, err = e.d.NodeUnpublishVolume(e.ctx, unpubReq(tx))
			if err != nil && restored {
				t.Errorf("unpublish after the attack, with every mount gone and the names back: %v", err)
			}
			mounttest.Intact(t, outside, outSnap)
			detachUnder(px) // so that the temporary directories can be removed
			t.Logf("%d iterations: %d clean, %d failed; %d swaps", iterations, ok, failed, a.Steps())
		})
	}
}

// detachUnder detaches every mount at or below dir in this namespace,
// stacked ones included, whatever name an exchange left it under.
func detachUnder(dir string) {
	for {
		ms, err := mountinfo.GetMounts(mountinfo.PrefixFilter(dir))
		if err != nil || len(ms) == 0 {
			return
		}
		for _, m := range ms {
			_ = unix.Unmount(m.Mountpoint, unix.MNT_DETACH)
		}
	}
}

// renamedTmpfs publishes a Memory volume and has the pod rename its
// target, tmpfs and all, to "elsewhere" (from a mount namespace of its
// own, where the target is not a mount point); it returns the target and
// the tmpfs's unique mount ID.
func renamedTmpfs(t *testing.T) (*nodeEnv, string, uint64) {
	t.Helper()
	mounttest.RequireMounts(t)
	e := newNodeEnv(t)
	px, tx := e.vol(t, testPodUID, "x")
	fd, err := unix.Open(px, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	a := mounttest.StartAttackerOnce(t, func() error { return unix.Renameat(fd, "mount", fd, "elsewhere") })
	e.publish(t, testPodUID, tx, AttrMedium, "Memory", AttrSizeLimit, "4Mi")
	id := mounttest.UniqueMountID(t, tx)
	if !a.StepWithin(5 * time.Second) {
		t.Fatal("the rename failed")
	}
	moved := filepath.Join(px, "elsewhere")
	t.Cleanup(func() { _ = unix.Unmount(moved, unix.MNT_DETACH) })
	return e, tx, id
}

// TestRenamedTmpfsKeepsRecord: the pod renames the target of a published
// Memory volume (mount -> elsewhere, in its own mount namespace) and
// leaves a symlink or nothing as mount. While the recorded mount (its
// unique ID) is still mounted somewhere, unpublish refuses and the record
// is kept: forgetting it would leave the tmpfs mounted, sized and holding
// the pod's data with no record naming it, and nothing would unmount it
// until the node reboots (a memory leak the pod can repeat).
func TestRenamedTmpfsKeepsRecord(t *testing.T) {
	e, tx, id := renamedTmpfs(t)
	_, err := e.d.NodeUnpublishVolume(e.ctx, unpubReq(tx))
	t.Logf("unpublish with the target renamed away: %v", err)
	if p, found := mounttest.MountPointOfUnique(t, id); found {
		if err == nil {
			t.Errorf("unpublish succeeded and forgot the record, but the volume's tmpfs is still mounted at %s", p)
		}
		if _, err := os.Stat(filepath.Join(e.root, "pods", testPodUID, "plugins", "kubernetes.io~empty-dir", "csi_x", "nodevol.json")); err != nil {
			t.Errorf("the record of a mount still mounted is gone: %v", err)
		}
	}
}

// TestRenamedTmpfsNotReplacedOnRepublish: as TestRenamedTmpfsKeepsRecord,
// but the kubelet publishes again (a restarted kubelet's reconstruction,
// or a retry): SetUp must not "repair" the volume whose mount vanished by
// mounting a new tmpfs and overwriting the record of the first, which is
// still mounted where the pod moved it.
func TestRenamedTmpfsNotReplacedOnRepublish(t *testing.T) {
	e, tx, id := renamedTmpfs(t)
	_, err := e.d.NodePublishVolume(e.ctx, pubReq(testPodUID, tx, AttrMedium, "Memory", AttrSizeLimit, "4Mi"))
	t.Logf("publish again: %v", err)
	t.Cleanup(func() { _ = unix.Unmount(tx, unix.MNT_DETACH) })
	if p, found := mounttest.MountPointOfUnique(t, id); found && err == nil {
		t.Errorf("publish made a new tmpfs and overwrote the record of the first, still mounted at %s", p)
	}
}
