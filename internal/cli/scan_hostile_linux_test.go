package cli

// "nodevol scan" on a kubelet root that an attacker writes into: swapped
// symlinks, filesystems that stop answering, foreign mounts on volumes.

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
)

// TestScanPluginVolumeSwapRace: scan lists the volume directories of
// every plugin by descriptors and examines each through them, never by a
// path the kernel resolves again. An attacker swaps
// pods/<uid>/volumes/<plugin> with a symlink to a host directory (here a
// decoy with a mount on the volume directory and one inside it): a scan
// that followed it would report the host directory's mounts as the
// volume's (host paths outside the kubelet root in the JSON and the
// agent's logs), and could make a volume in danger look in use or ok.
// Every racy iteration is one swap and one scan; any scan that reports a
// mount on or beneath the (never mounted) volume directory followed the
// symlink.
func TestScanPluginVolumeSwapRace(t *testing.T) {
	mounttest.RequireMounts(t)
	base := mounttest.RealTempDir(t)
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
// answers) must not hang scan: it answers from the mount table and the
// kubelet root's own filesystem without asking the volume's (no lstat or
// fstatfs of the volume directory). Otherwise one dead NFS server would
// stop "nodevol scan" on the node, and serve's scan loop with it (no scan
// completing again, readiness failing, the metrics frozen).
func TestScanStalledPluginVolume(t *testing.T) {
	mounttest.RequireMounts(t)
	for _, c := range []struct{ rel, mnt, want string }{
		{"kubernetes.io~nfs/share", "kubernetes.io~nfs/share", "in-use"},
		{"kubernetes.io~csi/pv/mount", "kubernetes.io~csi/pv/mount", "in-use"},
		{"kubernetes.io~secret/token/inner", "kubernetes.io~secret/token/inner", "danger"},
	} {
		t.Run(c.rel, func(t *testing.T) {
			root := mounttest.RealTempDir(t)
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

// TestScanStalledSubpathsDir: a filesystem that stopped answering (a FUSE
// daemon that hung, mounted by whoever can mount in the pod directory) on
// pods/<uid>/volume-subpaths or anywhere in the subPath tree must not hang
// the scan of the node: scan does not ask it (no lstat by path), and
// reports the mount (danger or error).
func TestScanStalledSubpathsDir(t *testing.T) {
	mounttest.RequireMounts(t)
	for _, rel := range []string{"volume-subpaths", "volume-subpaths/token", "volume-subpaths/token/c/0"} {
		t.Run(rel, func(t *testing.T) {
			root := mounttest.RealTempDir(t)
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

// TestScanForeignMountOnWrappedVolume: secret, configMap, projected,
// downwardAPI and gitRepo volumes are emptyDirs underneath: the kubelet
// tears them down through the emptyDir plugin, which unmounts the top
// mount only when statfs says tmpfs and otherwise calls os.RemoveAll on
// the directory, through whatever is mounted there. A mount on such a
// directory is in use only when it is a tmpfs (gitRepo: none at all), and
// alone; a NAS bound over a pod's secret volume directory (the incident
// this tool exists for, on another plugin) or mounts stacked on it are
// reported, each with its reason code.
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
			base := mounttest.RealTempDir(t)
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
