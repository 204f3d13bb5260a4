//go:build linux

package cli

import (
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
	"k8s.io/utils/clock"

	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
	"github.com/nodevol/nodevol/internal/testsupport/nodefixture"
)

// Reproduce (as root, for the mounts; docs/benchmarks.md has the numbers):
//
//	go test -run '^$' -bench 'Scan$' -benchmem -benchtime 3x -count 5 ./internal/cli

// scanNode makes a kubelet root shaped n (nodefixture.Make) under
// /dev/shm and returns it; mounts (n.Mounted, root only) are detached in
// the cleanup. The test binary runs in a private mount namespace
// (mounttest.Main).
func scanNode(tb testing.TB, n nodefixture.Shape) string {
	tb.Helper()
	if n.Mounted {
		mounttest.RequireMounts(tb)
	}
	base := mounttest.MemTempDir(tb)
	tb.Cleanup(func() { detachUnder(tb, base) })
	root := filepath.Join(base, "kubelet")
	if err := nodefixture.Make(root, n); err != nil {
		tb.Fatal(err)
	}
	return root
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
		n := nodefixture.Shape{Pods: pods, Mounted: true}
		vols := pods * nodefixture.VolumesPerPod
		b.Run(fmt.Sprintf("volumes=%d/mounts=%d", vols, pods), func(b *testing.B) {
			root := scanNode(b, n)
			var cpu cpuTime
			report := func(b *testing.B, spent time.Duration) {
				reportPerScan(b, spent, b.N)
				all, err := mountinfo.GetMounts(nil)
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(len(all)), "mounts")
			}
			b.Run("nodevol-scanRoot", func(b *testing.B) {
				report(b, wholeScans(b, root, n))
			})
			b.Run("nodevol-scan-json", func(b *testing.B) {
				cpu.start(b)
				for b.Loop() {
					// Exit 1: the NAS volumes are in danger.
					if code := run([]string{"scan", "--json", "--root", root}, io.Discard, io.Discard); code != ExitRefused {
						b.Fatalf("scan exit %d, want %d", code, ExitRefused)
					}
				}
				b.StopTimer()
				report(b, cpu.since(b))
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
					cpu.start(b)
					for b.Loop() {
						var err error
						if got, mounted, nested, err = mountUtilsScan(root, baseline.f); err != nil {
							b.Fatal(err)
						}
					}
					b.StopTimer()
					// Every fixture mount is on or beneath a volume
					// directory but the subPath binds.
					if want := n.InUse() + n.Danger(); got != vols || mounted+nested != want {
						b.Fatalf("baseline found %d volumes, %d mounted, %d nested; want %d volumes, %d mounts", got, mounted, nested, vols, want)
					}
					report(b, cpu.since(b))
				})
			}
		})
	}
}

// cpuTime measures the process's CPU time (user + system, GC included)
// since start: on a shared machine it varies less than the wall clock,
// which waits for the CPU too.
type cpuTime struct{ from unix.Rusage }

func (c *cpuTime) start(b *testing.B) {
	b.Helper()
	if err := unix.Getrusage(unix.RUSAGE_SELF, &c.from); err != nil {
		b.Fatal(err)
	}
}

func (c *cpuTime) since(b *testing.B) time.Duration {
	b.Helper()
	var now unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &now); err != nil {
		b.Fatal(err)
	}
	return time.Duration(now.Utime.Nano() - c.from.Utime.Nano() + now.Stime.Nano() - c.from.Stime.Nano())
}

// reportPerScan reports cpu-ms/scan (cpu over scans) and ms/scan (the
// benchmark's wall clock over scans).
func reportPerScan(b *testing.B, cpu time.Duration, scans int) {
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(scans)/1e6, "cpu-ms/scan")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(scans)/1e6, "ms/scan")
}

// wholeScans scans scanNode(n)'s root with scanRoot b.N times and checks
// the last report: the CPU time the scans took.
func wholeScans(b *testing.B, root string, n nodefixture.Shape) time.Duration {
	var cpu cpuTime
	var rep *scanReport
	cpu.start(b)
	for b.Loop() {
		var err error
		if rep, err = scanRoot(root); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	spent := cpu.since(b)
	wantNode(b, rep, n)
	return spent
}

// wantNode checks a scan of scanNode(n): every volume, the verdicts the
// mounts call for, nothing else.
func wantNode(tb testing.TB, rep *scanReport, n nodefixture.Shape) {
	tb.Helper()
	all := n.Pods * nodefixture.VolumesPerPod
	if got, want := len(rep.volumes), all; got != want {
		tb.Fatalf("scan found %d volumes, want %d", got, want)
	}
	if len(rep.problems) != 0 || len(rep.leftovers) != 0 {
		tb.Fatalf("scan found problems %v, leftovers %v; want none", rep.problems, rep.leftovers)
	}
	want := map[scanVerdict]int{verdictDanger: n.Danger(), verdictInUse: n.InUse(), verdictOK: all - n.Danger() - n.InUse()}
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
	n := nodefixture.Shape{Pods: 20}
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
	root := scanNode(t, nodefixture.Shape{Pods: 100})
	bin := buildBinary(t)
	opens := func(args ...string) (reads, volumes int) {
		t.Helper()
		// The trace goes to its own file: written into the scan's
		// stdout pipe, strace's lines split the report's (a pipe keeps
		// writes whole only up to PIPE_BUF) and a "podUID" went uncounted.
		trace := filepath.Join(t.TempDir(), "trace")
		cmd := exec.Command(strace, append([]string{"-f", "-qq", "-e", "trace=open,openat,openat2", "-o", trace, bin.path}, args...)...)
		out, err := cmd.Output()
		if ee, ok := err.(*exec.ExitError); err != nil && (!ok || ee.ExitCode() != ExitOK) {
			t.Fatalf("strace nodevol %v: %v", args, err)
		}
		traced, err := os.ReadFile(trace)
		if err != nil {
			t.Fatal(err)
		}
		reads = strings.Count(string(traced), "mountinfo\"")
		volumes = strings.Count(string(out), `"podUID"`)
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

// BenchmarkServeScan measures serve's scans on the node of BenchmarkScan
// (1,000 pods: 10,000 volume directories, 1,000 mounts), against the whole
// scan serve ran every interval before it kept its verdicts:
//
//   - whole: scanRoot, the whole scan (every scan before, every
//     defaultFullEvery intervals now);
//   - incremental-unchanged: incrementalScan with nothing changed since
//     the last scan (the steady state: the mount table read and compared,
//     every pod's directories stamped);
//   - incremental-after-mount: a NAS mounted into (then unmounted from) a
//     volume verified clean before each scan, the pods' stamps checked
//     less than stampEvery ago: the work between the mount table's watch
//     firing (after serve's 100 ms debounce) and the danger being
//     published (when the stamps are due too, add incremental-unchanged);
//   - steady-state: one whole scan and defaultFullEvery-1 unchanged ones,
//     what serve does in defaultFullEvery intervals; "millicores" is its
//     CPU time per second at the default 10 s interval.
//
// Stamps count as settled at once (settleAfter 0): on a node, pods'
// directories are older than 2 s; the fixture's are not.
func BenchmarkServeScan(b *testing.B) {
	for _, pods := range []int{100, 1000} {
		n := nodefixture.Shape{Pods: pods, Mounted: true}
		b.Run(fmt.Sprintf("volumes=%d/mounts=%d", pods*nodefixture.VolumesPerPod, pods), func(b *testing.B) {
			root := scanNode(b, n)
			var cpu cpuTime
			perScan := func(b *testing.B, scans int) { reportPerScan(b, cpu.since(b), scans) }
			newScan := func(b *testing.B) *incrementalScan {
				c := newIncrementalScan(clock.RealClock{}, time.Hour, 0)
				c.settleAfter = 0
				if _, err := c.scan(root); err != nil {
					b.Fatal(err)
				}
				return c
			}
			b.Run("whole", func(b *testing.B) {
				reportPerScan(b, wholeScans(b, root, n), b.N)
			})
			b.Run("incremental-unchanged", func(b *testing.B) {
				c := newScan(b)
				var rep *scanReport
				cpu.start(b)
				for b.Loop() {
					var err error
					if rep, err = c.scan(root); err != nil {
						b.Fatal(err)
					}
					if c.last.full || c.last.podsReexamined != 0 {
						b.Fatalf("scan with nothing changed: %+v", c.last)
					}
				}
				b.StopTimer()
				perScan(b, b.N)
				wantNode(b, rep, n)
			})
			b.Run("incremental-after-mount", func(b *testing.B) {
				c := newScan(b)
				c.stampEvery = time.Hour // as serve between two checks of the stamps
				nas := filepath.Join(emptyDirOf(root, pods/2, "cache"), "nas")
				if err := os.Mkdir(nas, 0o755); err != nil {
					b.Fatal(err)
				}
				defer os.Remove(nas)
				scan := func(want scanVerdict) {
					rep, err := c.scan(root)
					if err != nil {
						b.Fatal(err)
					}
					if c.last.full || c.last.podsReexamined != 1 {
						b.Fatalf("scan after a mount change: %+v", c.last)
					}
					if v := verdictOf(b, rep, filepath.Dir(nas)); v != want {
						b.Fatalf("%s: %s; want %s", filepath.Dir(nas), v, want)
					}
				}
				var busy time.Duration
				for b.Loop() {
					b.StopTimer()
					if err := unix.Mount("tmpfs", nas, "tmpfs", 0, "size=64k"); err != nil {
						b.Fatal(err)
					}
					cpu.start(b)
					b.StartTimer()
					scan(verdictDanger)
					b.StopTimer()
					busy += cpu.since(b)
					if err := unix.Unmount(nas, 0); err != nil {
						b.Fatal(err)
					}
					cpu.start(b)
					b.StartTimer()
					scan(verdictOK)
					b.StopTimer()
					busy += cpu.since(b)
					b.StartTimer()
				}
				reportPerScan(b, busy, 2*b.N)
			})
			b.Run("steady-state", func(b *testing.B) {
				c := newScan(b)
				cpu.start(b)
				for b.Loop() {
					c.fullEvery = 0 // this scan is a whole one
					if _, err := c.scan(root); err != nil || !c.last.full {
						b.Fatalf("whole scan: %v, %+v", err, c.last)
					}
					c.fullEvery = time.Hour
					for range defaultFullEvery - 1 {
						if _, err := c.scan(root); err != nil || c.last.full {
							b.Fatalf("unchanged scan: %v, %+v", err, c.last)
						}
					}
				}
				b.StopTimer()
				perScan(b, b.N*defaultFullEvery)
				interval := 10 * time.Second
				b.ReportMetric(float64(cpu.since(b).Nanoseconds())/float64(b.N)/float64(defaultFullEvery*interval.Nanoseconds())*1000, "millicores")
			})
		})
	}
}
