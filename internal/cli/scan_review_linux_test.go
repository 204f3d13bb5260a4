package cli

// Findings of the adversarial review of "nodevol scan" and "nodevol serve"
// (issue 15). Each test failed on the code before its fix.

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodevol/nodevol/internal/mounttest"
	"github.com/nodevol/nodevol/volume"
)

// TestScanPluginVolumeSwapRace: scan listed the volume directories of
// every plugin but emptyDir by descriptors, then examined each by its
// path (lstat, open, open again to list nested mounts), which the kernel
// resolved anew each time, following a symlink swapped in for
// pods/<uid>/volumes/<plugin> since the listing. An attacker who swaps
// that directory for a symlink to any host directory makes scan report
// the host directory's mounts as the volume's (host paths outside the
// kubelet root in the JSON and the agent's logs), and can make a volume
// in danger look in use or ok. Every racy iteration is one swap and one
// scan; any scan that reports a mount on or beneath the (never mounted)
// volume directory followed the symlink.
func TestScanPluginVolumeSwapRace(t *testing.T) {
	mounttest.RequireMounts(t)
	base := realTempDir(t)
	root := filepath.Join(base, "kubelet")
	vols := filepath.Join(root, "pods", testUID, "volumes")
	mounttest.Build(t, vols, "dir kubernetes.io~secret/token")
	// The decoy: the same names outside the root, with a mount on the
	// volume directory and one inside it.
	outside := filepath.Join(base, "outside", "kubernetes.io~secret")
	mounttest.Build(t, outside, "dir token")
	mounttest.Tmpfs(t, filepath.Join(outside, "token"), "size=1m")
	if err := os.Mkdir(filepath.Join(outside, "token", "inner"), 0o755); err != nil {
		t.Fatal(err)
	}
	mounttest.Tmpfs(t, filepath.Join(outside, "token", "inner"), "size=1m")
	if err := os.Symlink(outside, filepath.Join(vols, "swap")); err != nil {
		t.Fatal(err)
	}
	vfd, err := unix.Open(vols, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(vfd)
	a := mounttest.StartAttacker(t, func() error { return mounttest.Exchange(vfd, "kubernetes.io~secret", "swap") })
	defer mounttest.RestoreSwap(t, vols, "kubernetes.io~secret", "swap", outside)
	a.Resume()
	defer a.Pause()
	escaped := 0
	for i := 0; i < 3000 && escaped == 0; i++ {
		rep, err := scanRoot(root)
		if err != nil {
			t.Fatalf("scanRoot: %v", err)
		}
		for _, v := range rep.volumes {
			if v.MountPoint || len(v.NestedMounts) > 0 || strings.Contains(v.Reason, "outside") {
				escaped++
				t.Errorf("scan %d followed the swapped-in symlink out of the root: %s %s (%s) mountPoint=%v nested=%v: %s",
					i, v.Path, v.Verdict, v.ReasonCode, v.MountPoint, v.NestedMounts, v.Reason)
			}
		}
	}
	t.Logf("%d swaps", a.Steps())
}

// TestScanStalledPluginVolume: a volume of any plugin but emptyDir whose
// filesystem stopped answering (a hard NFS mount whose server is gone, a
// CSI driver's FUSE daemon that hung; here a FUSE filesystem that never
// answers) hung scan for good: examineIn lstat'ed the volume directory
// and fstatfs'ed it, both requests to the mounted filesystem. One dead
// NFS server then stopped "nodevol scan" on the node, and serve's scan
// loop with it (no scan ever completes again; readiness fails, the
// metrics freeze). Scan must answer from the mount table and the kubelet
// root's own filesystem without asking the volume's.
func TestScanStalledPluginVolume(t *testing.T) {
	mounttest.RequireMounts(t)
	for _, c := range []struct{ rel, mnt, want string }{
		{"kubernetes.io~nfs/share", "kubernetes.io~nfs/share", "in-use"},
		{"kubernetes.io~csi/pv/mount", "kubernetes.io~csi/pv/mount", "in-use"},
		{"kubernetes.io~secret/token/inner", "kubernetes.io~secret/token/inner", "danger"},
	} {
		t.Run(c.rel, func(t *testing.T) {
			root := realTempDir(t)
			dir := filepath.Join(root, "pods", testUID, "volumes", c.rel)
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			mounttest.StalledFUSE(t, "stalled", filepath.Join(root, "pods", testUID, "volumes", c.mnt), "040000")
			mounttest.Within(t, 5*time.Second, "scanRoot", func() error {
				rep, err := scanRoot(root)
				if err != nil {
					t.Errorf("scanRoot: %v", err)
					return err
				}
				if len(rep.volumes) != 1 || rep.volumes[0].Verdict.String() != c.want {
					t.Errorf("scanRoot = %+v; want one volume, %s", rep.volumes, c.want)
				}
				return nil
			})
		})
	}
}

// TestScanStalledSubpathsDir: scan decided whether a pod has subPath
// entries with an lstat of pods/<uid>/volume-subpaths by path, which asks
// a filesystem mounted there; one that stopped answering (a FUSE daemon
// that hung, mounted there by whoever can mount in the pod directory)
// hung the scan of the whole node for good. A mount anywhere in the
// subPath tree is reported, and nothing waits.
func TestScanStalledSubpathsDir(t *testing.T) {
	mounttest.RequireMounts(t)
	for _, rel := range []string{"volume-subpaths", "volume-subpaths/token", "volume-subpaths/token/c/0"} {
		t.Run(rel, func(t *testing.T) {
			root := realTempDir(t)
			mounttest.Build(t, filepath.Join(root, "pods", testUID, "volumes"), "dir kubernetes.io~secret/token")
			dir := filepath.Join(root, "pods", testUID, rel)
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			mounttest.StalledFUSE(t, "stalled", dir, "040000")
			mounttest.Within(t, 5*time.Second, "scanRoot", func() error {
				rep, err := scanRoot(root)
				if err != nil {
					t.Errorf("scanRoot: %v", err)
					return err
				}
				if len(rep.volumes) != 1 || (rep.volumes[0].Verdict != verdictDanger && rep.volumes[0].Verdict != verdictError) {
					t.Errorf("scanRoot = %+v; want one volume, danger or error (a mount in its subPath tree)", rep.volumes)
				}
				return nil
			})
		})
	}
}

// TestScanBoundsEntries: scan held every entry under the pods directory
// in memory, with no bound: whoever can write into a pod directory made
// pods/<uid>/volumes/<plugin>/<n> for any n (100,000 files with long
// names took 150 MB of heap, and each is examined), and an agent with a
// memory limit was OOM-killed on every restart. Now the listing stops at
// the scan's limits (lowered here) and says so as a problem, and the pod
// after the full one is still examined.
func TestScanBoundsEntries(t *testing.T) {
	limits := volume.ScanLimits{Node: 1000}
	root := realTempDir(t)
	dir := filepath.Join(root, "pods", testUID, "volumes", "kubernetes.io~secret")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, uid := range []string{testUID2} { // a pod after the full one
		if err := os.MkdirAll(filepath.Join(root, "pods", uid, "volumes", "kubernetes.io~secret", "v"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	const n = 3000
	for i := range n {
		f, err := unix.Openat(fd, fmt.Sprintf("v%05d", i), unix.O_CREAT|unix.O_WRONLY|unix.O_CLOEXEC, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		unix.Close(f)
	}
	rep, err := scanRootWithin(root, limits)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.volumes)+len(rep.problems)+len(rep.leftovers) > limits.Node+1 {
		t.Errorf("scanRoot holds %d volumes, %d problems and %d leftovers after %d entries; want at most %d in all (and one problem saying so)",
			len(rep.volumes), len(rep.problems), len(rep.leftovers), n, limits.Node+1)
	}
	bounded := false
	for _, p := range rep.problems {
		if errors.Is(p.err, volume.ErrTooManyEntries) {
			bounded = true
		}
	}
	if !bounded {
		t.Errorf("scanRoot problems = %v; want one matching volume.ErrTooManyEntries", rep.problems)
	}
	if !slices.ContainsFunc(rep.volumes, func(v scanVolume) bool { return v.PodUID == testUID2 }) {
		t.Errorf("the pod after the full one was not examined")
	}
	if rep.code() == ExitOK {
		t.Errorf("scan exit code = %d; want non-zero for an incomplete scan", rep.code())
	}
}

// TestScanForeignMountOnWrappedVolume: secret, configMap, projected,
// downwardAPI and gitRepo volumes are emptyDirs underneath: the kubelet
// tears them down through the emptyDir plugin, which unmounts the top
// mount only when statfs says tmpfs and otherwise calls os.RemoveAll on
// the directory, through whatever is mounted there. scan called any single
// mount on such a directory in-use (exit 0) and ignored mounts stacked on
// it: a NAS bind-mounted over a pod's secret volume directory (the
// incident this tool exists for, on another plugin) was healthy. Now a
// mount on such a directory must be tmpfs (gitRepo: none at all), alone.
func TestScanForeignMountOnWrappedVolume(t *testing.T) {
	mounttest.RequireMounts(t)
	cases := []struct {
		name   string
		plugin string
		mount  func(t *testing.T, dir, nas string)
		want   reasonCode
	}{
		{"secret on its own tmpfs", "kubernetes.io~secret", func(t *testing.T, dir, _ string) {
			mounttest.Tmpfs(t, dir, "size=1m")
		}, reasonPluginMount},
		{"NAS bound on a secret", "kubernetes.io~secret", func(t *testing.T, dir, nas string) {
			mounttest.Bind(t, nas, dir)
		}, reasonForeignMount},
		{"NAS bound on a projected volume", "kubernetes.io~projected", func(t *testing.T, dir, nas string) {
			mounttest.Bind(t, nas, dir)
		}, reasonForeignMount},
		{"tmpfs stacked on a configMap's tmpfs", "kubernetes.io~configmap", func(t *testing.T, dir, _ string) {
			mounttest.Tmpfs(t, dir, "size=1m")
			mounttest.Tmpfs(t, dir, "size=1m")
		}, reasonStackedMounts},
		{"NAS stacked on a downwardAPI tmpfs", "kubernetes.io~downward-api", func(t *testing.T, dir, nas string) {
			mounttest.Tmpfs(t, dir, "size=1m")
			mounttest.Bind(t, nas, dir)
		}, reasonStackedMounts},
		{"tmpfs on a gitRepo", "kubernetes.io~git-repo", func(t *testing.T, dir, _ string) {
			mounttest.Tmpfs(t, dir, "size=1m")
		}, reasonForeignMount},
		{"NFS-like mount on an nfs volume", "kubernetes.io~nfs", func(t *testing.T, dir, nas string) {
			mounttest.Bind(t, nas, dir)
		}, reasonPluginMount},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			base := realTempDir(t)
			root := filepath.Join(base, "kubelet")
			dir := filepath.Join(root, "pods", testUID, "volumes", c.plugin, "v")
			nas := filepath.Join(base, "nas")
			mounttest.Build(t, nas, "file precious keep")
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			c.mount(t, dir, nas)
			rep, err := scanRoot(root)
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.volumes) != 1 || rep.volumes[0].ReasonCode != c.want {
				t.Fatalf("scanRoot = %+v; want one volume, %s (%s)", rep.volumes, c.want.verdict(), c.want)
			}
		})
	}
}
