//go:build linux

package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
	mount "k8s.io/mount-utils"

	"github.com/nodevol/nodevol/emptydir"
	"github.com/nodevol/nodevol/internal/mounttest"
	"github.com/nodevol/nodevol/volume"
)

// Reproduce (as root, for the mounts; docs/benchmarks.md has the numbers):
//
//	go test -run '^$' -bench 'Scan$' -benchmem -benchtime 5x -count 5 ./internal/cli

// nodeShape is a node for the scan benchmarks: pods of volumesPerPod
// volume directories each, and, when mounted, exactly pods mounts made by
// the fixture (see scanNode).
type nodeShape struct {
	pods    int
	mounted bool
}

// volumesPerPod is the number of volume directories of each pod scanNode
// makes, in this mix (what the kubelet writes for each plugin):
//
//	projected  kube-api-access-xxxxx  the service account token, CA and namespace
//	secret     tls                    a secret
//	configmap  config, scripts        two config maps
//	empty-dir  cache, tmp, logs       Default medium
//	empty-dir  shm                    Memory medium in one pod of four, else Default
//	csi        pvc-…-0, pvc-…-1       vol_data.json and the target directory mount/
const volumesPerPod = 10

// scanNode makes a kubelet root shaped like a busy node, under /dev/shm,
// and returns it. Each pod gets ten volume directories (volumesPerPod);
// emptyDirs are set up by nodevol's emptyDir plugin (its metadata and
// ready marker, as on a node running nodevol-kubelet), secret, configmap
// and projected volumes hold the kubelet's atomic-writer layout (a
// timestamped directory, the ..data symlink and one symlink per key), and
// each pod directory has the kubelet's plugins/ ready markers for the
// wrapped volumes, etc-hosts and a containers/ entry.
//
// With mounted (root only) it adds exactly n.pods mounts, n.pods/100 of
// them a "NAS" tmpfs nested in a Default emptyDir (danger), n.pods/50 a
// container's subPath bind of a directory of the logs emptyDir (as the
// kubelet makes them), and the rest one mount in each of the other pods,
// in turn a tmpfs on the projected volume, on the secret, a Memory
// emptyDir's own tmpfs (made by SetUp), and a tmpfs on a CSI volume's
// target directory mount/. Mounts are detached in the cleanup; the test
// binary runs in a private mount namespace (mounttest.Main).
func scanNode(tb testing.TB, n nodeShape) string {
	tb.Helper()
	if n.mounted {
		mounttest.RequireMounts(tb)
	}
	base := mounttest.MemTempDir(tb)
	tb.Cleanup(func() { detachUnder(tb, base) })
	root := filepath.Join(base, "kubelet")
	layout, err := volume.NewLayout(root)
	if err != nil {
		tb.Fatal(err)
	}
	plugin := emptydir.New(volume.NewHost(layout, nil, 1<<30))
	nas, subpaths := 0, 0
	if n.mounted {
		nas, subpaths = n.pods/100, n.pods/50
	}
	for p := range n.pods {
		uid := fmt.Sprintf("%08x-1d4e-4b7a-9c21-%012x", p, p)
		kind := -1 // which volume of the pod gets a mount; -1: none
		switch {
		case !n.mounted:
		case p < nas:
			kind = mountNAS
		case p < nas+subpaths:
			kind = mountSubpath
		default:
			kind = p % 4
		}
		makePod(tb, layout, plugin, uid, kind)
	}
	return root
}

// Which volume of a pod scanNode mounts something on.
const (
	mountProjected = iota
	mountSecret
	mountMemory
	mountCSI
	mountNAS
	mountSubpath
)

func makePod(tb testing.TB, layout volume.Layout, plugin *emptydir.Plugin, uid string, kind int) {
	tb.Helper()
	podDir, err := layout.PodDir(uid)
	if err != nil {
		tb.Fatal(err)
	}
	dir := func(plugin, name string) string {
		d, err := layout.VolumeDir(uid, plugin, name)
		if err != nil {
			tb.Fatal(err)
		}
		return d
	}
	// emptyDirs, through the plugin as the volume manager calls it.
	var eds []volume.Spec
	for _, name := range []string{"cache", "tmp", "logs"} {
		eds = append(eds, volume.Spec{Name: name, EmptyDir: &volume.EmptyDirSource{}})
	}
	shm := volume.EmptyDirSource{}
	if kind == mountMemory {
		shm.Medium = volume.StorageMediumMemory
	}
	eds = append(eds, volume.Spec{Name: "shm", EmptyDir: &shm})
	pod := &volume.Pod{UID: uid, Volumes: eds}
	for i := range pod.Volumes {
		m, err := plugin.NewMounter(&pod.Volumes[i], pod)
		if err != nil {
			tb.Fatal(err)
		}
		if err := m.SetUp(context.Background(), volume.MounterArgs{}); err != nil {
			tb.Fatalf("SetUp(%s/%s): %v", uid, pod.Volumes[i].Name, err)
		}
	}
	// The kubelet's atomic-writer volumes (secret, configmap, projected
	// wrap an emptyDir: a ready marker under plugins/kubernetes.io~empty-dir/wrapped_<name>).
	const ts = "..2026_11_23_10_00_00.123456789"
	writer := []struct {
		plugin, name string
		keys         []string
		mount        bool
	}{
		{"kubernetes.io/projected", "kube-api-access-" + uid[:5], []string{"ca.crt", "namespace", "token"}, kind == mountProjected},
		{"kubernetes.io/secret", "tls", []string{"tls.crt", "tls.key"}, kind == mountSecret},
		{"kubernetes.io/configmap", "config", []string{"app.yaml"}, false},
		{"kubernetes.io/configmap", "scripts", []string{"start.sh", "health.sh"}, false},
	}
	for _, w := range writer {
		d := dir(w.plugin, w.name)
		if w.mount {
			mounttest.Tmpfs(tb, d, "size=64k")
		}
		specs := []string{"dir " + ts, "symlink ..data " + ts}
		for _, k := range w.keys {
			specs = append(specs, "file "+ts+"/"+k+" x", "symlink "+k+" ..data/"+k)
		}
		mounttest.Build(tb, d, specs...)
		mounttest.Build(tb, podDir, "file plugins/kubernetes.io~empty-dir/wrapped_"+w.name+"/ready ")
	}
	// CSI: vol_data.json beside the target directory the driver mounts.
	for i := range 2 {
		pv := fmt.Sprintf("pvc-%s-%d", uid[:8], i)
		d := dir("kubernetes.io/csi", pv)
		mounttest.Build(tb, d,
			`file vol_data.json {"attachmentID":"csi-`+uid[:12]+`","driverName":"ebs.csi.aws.com","nodeName":"node-1","specVolID":"`+pv+`","volumeHandle":"vol-0`+uid[:8]+`","volumeLifecycleMode":"Persistent"}`,
			"dir mount")
		if i == 0 && kind == mountCSI {
			mounttest.Tmpfs(tb, filepath.Join(d, "mount"), "size=64k")
		}
	}
	mounttest.Build(tb, podDir, "file etc-hosts 127.0.0.1 localhost", "file containers/app/0a1b2c3d ")
	switch kind {
	case mountNAS:
		mounttest.Tmpfs(tb, filepath.Join(dir(emptydir.PluginName, "cache"), "nas"), "size=64k")
	case mountSubpath:
		logs := filepath.Join(dir(emptydir.PluginName, "logs"), "app")
		mounttest.Build(tb, logs, "file current.log x")
		sp, err := layout.VolumeSubpathsDir(uid, "logs")
		if err != nil {
			tb.Fatal(err)
		}
		mounttest.Bind(tb, logs, filepath.Join(sp, "app", "0"))
	}
}

// detachUnder detaches every mount beneath dir, deepest first (SetUp's
// Memory tmpfs mounts are not registered with the testing cleanup).
func detachUnder(tb testing.TB, dir string) {
	mounts, err := mountinfo.GetMounts(mountinfo.PrefixFilter(dir))
	if err != nil {
		tb.Errorf("list mounts under %s: %v", dir, err)
		return
	}
	slices.SortFunc(mounts, func(a, b *mountinfo.Info) int { return len(b.Mountpoint) - len(a.Mountpoint) })
	for _, m := range mounts {
		if m.Mountpoint != dir {
			_ = unix.Unmount(m.Mountpoint, unix.MNT_DETACH)
		}
	}
}

// mountUtilsScan is the baseline: what an operator would script with
// k8s.io/mount-utils (the mount library the kubelet uses). It reads the
// mount table once (mounter.List, /proc/mounts), lists
// <root>/pods/*/volumes/*/* with os.ReadDir, asks isNotMountPoint of each
// volume directory and counts the mounts beneath it by path prefix in the
// sorted list (a binary search: the fastest way to ask that of a list).
//
// It does not: reach anything by descriptor (every path is resolved from
// the root again, following symlinks below it), validate names, read
// emptyDir metadata or tell a volume's own mount from a foreign one,
// recognise a CSI volume's target mount, look at subPath entries, find
// mounts made through another bind mount of the same filesystem (the table
// names them elsewhere), or report problems and leftovers. It returns the
// number of volumes, of mount points and of nested mounts found.
func mountUtilsScan(root string, isNotMountPoint func(mount.Interface, string) (bool, error)) (vols, mounted, nested int, err error) {
	m := mount.New("")
	mps, err := m.List()
	if err != nil {
		return 0, 0, 0, err
	}
	paths := make([]string, len(mps))
	for i, mp := range mps {
		paths[i] = mp.Path
	}
	sort.Strings(paths)
	pods := filepath.Join(root, "pods")
	podEntries, err := os.ReadDir(pods)
	if err != nil {
		return 0, 0, 0, err
	}
	for _, pod := range podEntries {
		volsDir := filepath.Join(pods, pod.Name(), "volumes")
		plugins, err := os.ReadDir(volsDir)
		if err != nil {
			if os.IsNotExist(err) {
				continue
			}
			return 0, 0, 0, err
		}
		for _, pl := range plugins {
			plDir := filepath.Join(volsDir, pl.Name())
			entries, err := os.ReadDir(plDir)
			if err != nil {
				return 0, 0, 0, err
			}
			for _, e := range entries {
				dir := filepath.Join(plDir, e.Name())
				vols++
				notMnt, err := isNotMountPoint(m, dir)
				if err != nil {
					return 0, 0, 0, fmt.Errorf("%s: %w", dir, err)
				}
				if !notMnt {
					mounted++
				}
				prefix := dir + "/"
				for i := sort.SearchStrings(paths, prefix); i < len(paths) && strings.HasPrefix(paths[i], prefix); i++ {
					nested++
				}
			}
		}
	}
	return vols, mounted, nested, nil
}

// BenchmarkScan scans a node of 100 and of 1,000 pods (1,000 and 10,000
// volume directories, with 100 and 1,000 mounts made by the fixture as
// root) three ways: scanRoot (what serve runs each interval), "nodevol
// scan --json" end to end (output discarded), and the mount-utils
// baseline an operator would otherwise run (mountUtilsScan), once with
// IsLikelyNotMountPoint (a statx of the directory) and once with
// IsMountPoint (moby/sys/mountinfo's MountedFast: openat2 with
// RESOLVE_NO_XDEV). The fixture is built once per size, outside the timed
// loops; "ms/scan" is ns/op in milliseconds, "cpu-ms/scan" the process's
// CPU time per scan, "mounts" the size of the mount table.
func BenchmarkScan(b *testing.B) {
	for _, pods := range []int{100, 1000} {
		n := nodeShape{pods: pods, mounted: true}
		vols := pods * volumesPerPod
		b.Run(fmt.Sprintf("volumes=%d/mounts=%d", vols, pods), func(b *testing.B) {
			root := scanNode(b, n)
			// cpu-ms/scan is the process's CPU time (user + system, GC
			// included) per scan: on a shared machine it varies less than
			// the wall clock, which waits for the CPU too.
			var before unix.Rusage
			start := func(b *testing.B) {
				if err := unix.Getrusage(unix.RUSAGE_SELF, &before); err != nil {
					b.Fatal(err)
				}
			}
			report := func(b *testing.B) {
				var after unix.Rusage
				if err := unix.Getrusage(unix.RUSAGE_SELF, &after); err != nil {
					b.Fatal(err)
				}
				cpu := time.Duration(after.Utime.Nano() - before.Utime.Nano() + after.Stime.Nano() - before.Stime.Nano())
				b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N)/1e6, "cpu-ms/scan")
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/1e6, "ms/scan")
				all, err := mountinfo.GetMounts(nil)
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(len(all)), "mounts")
			}
			b.Run("nodevol-scanRoot", func(b *testing.B) {
				var rep *scanReport
				start(b)
				for b.Loop() {
					var err error
					if rep, err = scanRoot(root); err != nil {
						b.Fatal(err)
					}
				}
				b.StopTimer()
				wantNode(b, rep, n)
				report(b)
			})
			b.Run("nodevol-scan-json", func(b *testing.B) {
				start(b)
				for b.Loop() {
					// Exit 1: the NAS volumes are in danger.
					if code := run([]string{"scan", "--json", "--root", root}, io.Discard, io.Discard); code != ExitRefused {
						b.Fatalf("scan exit %d, want %d", code, ExitRefused)
					}
				}
				b.StopTimer()
				report(b)
			})
			for _, baseline := range []struct {
				name string
				f    func(mount.Interface, string) (bool, error)
			}{
				{"mount-utils-IsLikelyNotMountPoint", func(m mount.Interface, dir string) (bool, error) { return m.IsLikelyNotMountPoint(dir) }},
				{"mount-utils-IsMountPoint", func(m mount.Interface, dir string) (bool, error) {
					mnt, err := m.IsMountPoint(dir)
					return !mnt, err
				}},
			} {
				b.Run(baseline.name, func(b *testing.B) {
					var got, mounted, nested int
					start(b)
					for b.Loop() {
						var err error
						if got, mounted, nested, err = mountUtilsScan(root, baseline.f); err != nil {
							b.Fatal(err)
						}
					}
					b.StopTimer()
					// Every fixture mount is on or beneath a volume
					// directory but the subPath binds.
					if want := n.pods - n.pods/50; got != vols || mounted+nested != want {
						b.Fatalf("baseline found %d volumes, %d mounted, %d nested; want %d volumes, %d mounts", got, mounted, nested, vols, want)
					}
					report(b)
				})
			}
		})
	}
}

// wantNode checks a scan of scanNode(n): every volume, the verdicts the
// mounts call for, nothing else.
func wantNode(tb testing.TB, rep *scanReport, n nodeShape) {
	tb.Helper()
	if got, want := len(rep.volumes), n.pods*volumesPerPod; got != want {
		tb.Fatalf("scan found %d volumes, want %d", got, want)
	}
	if len(rep.problems) != 0 || len(rep.leftovers) != 0 {
		tb.Fatalf("scan found problems %v, leftovers %v; want none", rep.problems, rep.leftovers)
	}
	want := map[scanVerdict]int{verdictDanger: n.pods / 100}
	want[verdictInUse] = n.pods - n.pods/100 - n.pods/50
	want[verdictOK] = n.pods*volumesPerPod - want[verdictInUse] - want[verdictDanger]
	if !n.mounted {
		want = map[scanVerdict]int{verdictOK: n.pods * volumesPerPod}
	}
	for _, v := range scanVerdicts {
		if got := rep.count(v); got != want[v] {
			for i := range rep.volumes {
				if rep.volumes[i].Verdict != verdictOK && rep.volumes[i].Verdict != verdictInUse {
					tb.Logf("%s: %s %s", rep.volumes[i].Path, rep.volumes[i].Verdict, rep.volumes[i].Reason)
				}
			}
			tb.Fatalf("scan found %d %s volumes, want %d", got, v, want[v])
		}
	}
}

// TestScanNode checks the benchmark's fixture without mounts: every
// volume found, every one ok (the mounted shape is checked by
// BenchmarkScan itself, after its timed loop).
func TestScanNode(t *testing.T) {
	n := nodeShape{pods: 20}
	rep, err := scanRoot(scanNode(t, n))
	if err != nil {
		t.Fatal(err)
	}
	wantNode(t, rep, n)
}

// TestScanReadsTheMountTableOnce runs the built binary under strace and
// counts opens of mountinfo: one, whatever the number of volumes. The Go
// runtime reads mountinfo itself at start-up (cgroup-aware GOMAXPROCS), so
// the count is taken against `nodevol help`, which reads no mount table.
func TestScanReadsTheMountTableOnce(t *testing.T) {
	strace, err := exec.LookPath("strace")
	if err != nil {
		mounttest.Skip(t, "strace not installed (.ci/run installs it)")
	}
	root := scanNode(t, nodeShape{pods: 100})
	bin := buildBinary(t)
	opens := func(args ...string) (reads, volumes int) {
		t.Helper()
		cmd := exec.Command(strace, append([]string{"-f", "-qq", "-e", "trace=open,openat,openat2", "-o", "/dev/stdout", bin.path}, args...)...)
		out, err := cmd.Output()
		if ee, ok := err.(*exec.ExitError); err != nil && (!ok || ee.ExitCode() != ExitOK) {
			t.Fatalf("strace nodevol %v: %v", args, err)
		}
		for line := range strings.Lines(string(out)) {
			if strings.Contains(line, "mountinfo\"") {
				reads++
			}
			if strings.Contains(line, `"podUID"`) {
				volumes++
			}
		}
		return reads, volumes
	}
	baseline, _ := opens("help")
	reads, volumes := opens("scan", "--json", "--root", root)
	if volumes != 1000 {
		t.Fatalf("scan reported %d volumes; want 1000", volumes)
	}
	if reads-baseline != 1 {
		t.Errorf("scan opened mountinfo %d times (the runtime alone: %d); want exactly 1 more", reads, baseline)
	}
}
