package harness

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

func testSoakParams() soakParams {
	return soakParams{Seed: 42, Duration: 30 * time.Minute, Rate: 30, Nodes: 2, MinLifetime: 5 * time.Second, MaxLifetime: 30 * time.Second,
		NASEvery: 10, NASHold: 20 * time.Second, SetUpDeleteEvery: 20, FaultEvery: 45 * time.Second}
}

// TestScheduleReplays: the same seed and parameters give the same
// schedule, another seed another one; and changing the faults' parameters
// leaves the pods as they were.
func TestScheduleReplays(t *testing.T) {
	p := testSoakParams()
	a, err := makeSchedule(p)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := makeSchedule(p)
	if !reflect.DeepEqual(a, b) {
		t.Fatal("the same seed gave two schedules")
	}
	p.Seed++
	c, _ := makeSchedule(p)
	if reflect.DeepEqual(a.Pods, c.Pods) {
		t.Fatal("another seed gave the same pods")
	}
	p.Seed--
	p.FaultEvery = 0
	d, _ := makeSchedule(p)
	if !reflect.DeepEqual(a.Pods, d.Pods) || len(d.Faults) != 0 {
		t.Fatalf("without faults: pods changed (%v) or faults left (%d)", !reflect.DeepEqual(a.Pods, d.Pods), len(d.Faults))
	}
}

// TestScheduleMix checks a 30-minute schedule's shape: about the rate,
// every pod within the duration on a node, 2–5 volumes of which one can
// hold a NAS, about one pod in ten with a NAS in a volume it has, every
// volume type and fault kind present, no HugePages unless available.
func TestScheduleMix(t *testing.T) {
	p := testSoakParams()
	s, err := makeSchedule(p)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(s.Pods); n < 800 || n > 1000 {
		t.Errorf("%d pods in 30 minutes at 30 a minute", n)
	}
	types := map[volumeType]int{}
	nas, setUpDeletes := 0, 0
	var last time.Duration
	for _, pp := range s.Pods {
		if pp.At < last || pp.At >= p.Duration || pp.Node < 1 || pp.Node > p.Nodes {
			t.Fatalf("pod %d at %v on node %d", pp.Index, pp.At, pp.Node)
		}
		last = pp.At
		if len(pp.Volumes) < minVolumesPerPod || len(pp.Volumes) > maxVolumesPerPod || !slices.ContainsFunc(pp.Volumes, nasHolding) {
			t.Fatalf("pod %d has volumes %v", pp.Index, pp.Volumes)
		}
		if pp.Lifetime < p.MinLifetime || pp.Lifetime > p.MaxLifetime {
			t.Fatalf("pod %d lives %v", pp.Index, pp.Lifetime)
		}
		for _, v := range pp.Volumes {
			types[v]++
		}
		if pp.SubPath {
			types[volSubPath]++
			if !slices.Contains(pp.Volumes, volEmptyDir) {
				t.Fatalf("pod %d: a subPath without an emptyDir", pp.Index)
			}
		}
		if pp.DeleteInSetUp {
			setUpDeletes++
			if pp.NAS != nil {
				t.Fatalf("pod %d is deleted in its SetUp and has a NAS", pp.Index)
			}
		}
		if pp.NAS != nil {
			nas++
			if !slices.Contains(pp.Volumes, pp.NAS.Volume) || !nasHolding(pp.NAS.Volume) || pp.NAS.Hold > p.NASHold || len(pp.NAS.Files) == 0 {
				t.Fatalf("pod %d: NAS %+v in volumes %v", pp.Index, pp.NAS, pp.Volumes)
			}
		}
	}
	for _, v := range volumeTypes {
		if (types[v] == 0) != (v == volHugePages) {
			t.Errorf("volume type %s in %d pods", v, types[v])
		}
	}
	if frac := float64(nas) / float64(len(s.Pods)); frac < 0.06 || frac > 0.12 {
		t.Errorf("NAS in %.3f of the pods; want about a tenth (less the pods deleted in SetUp)", frac)
	}
	if setUpDeletes == 0 {
		t.Error("no pod deleted in its SetUp")
	}
	kinds := map[faultKind]int{}
	for _, f := range s.Faults {
		kinds[f.Kind]++
		if (f.Node == 0) != (f.Kind == faultAPIServerRestart) || f.Down >= 3*time.Second {
			t.Errorf("fault %+v", f)
		}
	}
	for _, k := range scheduledFaults {
		if kinds[k] < 5 {
			t.Errorf("%s injected %d times in 30 minutes", k, kinds[k])
		}
	}
	p.HugePages = true
	s, _ = makeSchedule(p)
	if !slices.ContainsFunc(s.Pods, func(pp podPlan) bool { return slices.Contains(pp.Volumes, volHugePages) }) {
		t.Error("HugePages available, and no pod has a HugePages volume")
	}
}

// TestShortScheduleInjectsEveryFault: faults come in shuffled rounds of
// every kind, so that a short run (CI's) injects each once.
func TestShortScheduleInjectsEveryFault(t *testing.T) {
	p := testSoakParams()
	for _, c := range []struct{ duration, every time.Duration }{{4 * time.Minute, 25 * time.Second}, {3 * time.Minute, 20 * time.Second}, {3 * time.Minute, 2 * time.Minute}} {
		p.Duration, p.FaultEvery = c.duration, c.every
		for seed := uint64(1); seed <= 50; seed++ {
			p.Seed = seed
			s, _ := makeSchedule(p)
			if len(s.Faults) < len(scheduledFaults) {
				t.Fatalf("%v with a fault every %v, seed %d: %d faults", c.duration, c.every, seed, len(s.Faults))
			}
			kinds := map[faultKind]bool{}
			var last time.Duration
			for _, f := range s.Faults[:len(scheduledFaults)] {
				kinds[f.Kind] = true
				if f.At < last || f.At >= p.Duration || (f.Kind == faultAPIServerRestart) != (f.Node == 0) {
					t.Fatalf("%v with a fault every %v, seed %d: fault %+v", c.duration, c.every, seed, f)
				}
				last = f.At
			}
			if len(kinds) != len(scheduledFaults) {
				t.Errorf("%v with a fault every %v, seed %d: the first %d faults are of %d kinds", c.duration, c.every, seed, len(scheduledFaults), len(kinds))
			}
		}
	}
}

// TestSoakPod builds a pod with every volume type and checks what the
// soak relies on: names by type, CSI attributes, the subPath, hugepages
// resources, the node, and no automounted token.
func TestSoakPod(t *testing.T) {
	p := podPlan{Index: 7, Node: 2, Volumes: slices.DeleteFunc(slices.Clone(volumeTypes), func(v volumeType) bool { return v == volSubPath }), SubPath: true}
	pod := soakPod(p, "emptydir.nodevol.github.io")
	if pod.Name != "soak-00007" || pod.Namespace != soakNamespace || pod.Spec.NodeSelector[corev1.LabelHostname] != "e2e-node-2" || *pod.Spec.AutomountServiceAccountToken {
		t.Fatalf("pod %s/%s on %v, automount %v", pod.Namespace, pod.Name, pod.Spec.NodeSelector, *pod.Spec.AutomountServiceAccountToken)
	}
	if len(pod.Spec.Volumes) != len(p.Volumes) {
		t.Fatalf("%d volumes, want %d", len(pod.Spec.Volumes), len(p.Volumes))
	}
	for i, v := range pod.Spec.Volumes {
		if ty, ok := typeOfVolume(v.Name); !ok || ty != p.Volumes[i] {
			t.Errorf("volume %s is not of type %s", v.Name, p.Volumes[i])
		}
	}
	c := pod.Spec.Containers[0]
	if !slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.SubPath == "sub" && m.Name == volumeName[volEmptyDir] }) {
		t.Error("no subPath mount of the emptyDir")
	}
	if q := c.Resources.Limits[hugePageResource]; q.String() != "2Mi" {
		t.Errorf("hugepages limit %s", q.String())
	}
	for _, v := range pod.Spec.Volumes {
		if v.CSI != nil && (v.CSI.Driver != "emptydir.nodevol.github.io" || v.CSI.VolumeAttributes["medium"] == "") {
			t.Errorf("CSI volume %s: %+v", v.Name, v.CSI)
		}
	}
	if got := nasDir("u", volCSIMemory); got != "/var/lib/kubelet/pods/u/volumes/kubernetes.io~csi/csim/mount/nas" {
		t.Errorf("nasDir = %s", got)
	}
	if got := nasDir("u", volMemory); got != "/var/lib/kubelet/pods/u/volumes/kubernetes.io~empty-dir/mem/nas" {
		t.Errorf("nasDir = %s", got)
	}
}

// Lines of kubelet v1.37.2 at --v=2, as the soak's runs logged them.
const (
	mountStartedLog = `I1127 11:27:25.486147     110 reconciler_common.go:225] "operationExecutor.MountVolume started for volume \"mem\" (UniqueName: \"kubernetes.io/empty-dir/272799b8-86ee-42d7-8d88-d252ef87389f-mem\") pod \"soak-00003\" (UID: \"272799b8-86ee-42d7-8d88-d252ef87389f\") " pod="nodevol-soak/soak-00003"`
	setUpLog        = `I1127 11:27:25.486282     110 operation_generator.go:620] "MountVolume.SetUp succeeded for volume \"csid\" (UniqueName: \"kubernetes.io/csi/57b21e63-c10d-4c64-bf1d-1efa9c69974d-csid\") pod \"soak-00004\" (UID: \"57b21e63-c10d-4c64-bf1d-1efa9c69974d\") " pod="nodevol-soak/soak-00004"`
	tearDownLog     = `I1127 11:27:37.111220     110 operation_generator.go:791] UnmountVolume.TearDown succeeded for volume "kubernetes.io/empty-dir/272799b8-86ee-42d7-8d88-d252ef87389f-edl" pod "272799b8-86ee-42d7-8d88-d252ef87389f" (UID: "272799b8-86ee-42d7-8d88-d252ef87389f"). InnerVolumeSpecName "edl". PluginName "kubernetes.io/empty-dir", VolumeGIDValue ""`
	tearDownFailLog = `E1127 11:28:58.375812    4897 nestedpendingoperations.go:348] Operation for "{volumeName:kubernetes.io/csi/27fce257-6d1a-463f-9fa9-8b415790a0e8-csid podName:27fce257-6d1a-463f-9fa9-8b415790a0e8 nodeName:}" failed. No retries permitted until 2026-11-27 11:28:58.875796184 +0000 UTC m=+15.389308455 (durationBeforeRetry 500ms). Error: UnmountVolume.TearDown failed for volume "kubernetes.io/csi/27fce257-6d1a-463f-9fa9-8b415790a0e8-csid" (UniqueName: "kubernetes.io/csi/27fce257-6d1a-463f-9fa9-8b415790a0e8-csid") pod "27fce257-6d1a-463f-9fa9-8b415790a0e8" (UID: "27fce257-6d1a-463f-9fa9-8b415790a0e8") : kubernetes.io/csi: Unmounter.TearDownAt failed: rpc error: code = FailedPrecondition desc = 1 mount beneath the volume`
)

func TestParseVolumeLine(t *testing.T) {
	for _, c := range []struct {
		line                 string
		kind                 volumeEventKind
		plugin, uid, vol, at string
	}{
		{mountStartedLog, eventMountStarted, "kubernetes.io/empty-dir", "272799b8-86ee-42d7-8d88-d252ef87389f", "mem", "11:27:25.486147"},
		{setUpLog, eventSetUp, "kubernetes.io/csi", "57b21e63-c10d-4c64-bf1d-1efa9c69974d", "csid", "11:27:25.486282"},
		{tearDownLog, eventTearDown, "kubernetes.io/empty-dir", "272799b8-86ee-42d7-8d88-d252ef87389f", "edl", "11:27:37.111220"},
		{tearDownFailLog, eventTearDownFailed, "kubernetes.io/csi", "27fce257-6d1a-463f-9fa9-8b415790a0e8", "csid", "11:28:58.375812"},
	} {
		ev, ok := parseVolumeLine(c.line, 2026)
		if !ok || ev.Kind != c.kind || ev.Plugin != c.plugin || ev.UID != c.uid || ev.Volume != c.vol || ev.Time.Format("15:04:05.000000") != c.at || ev.Time.Year() != 2026 {
			t.Errorf("parseVolumeLine(%.60q…) = %+v, %v", c.line, ev, ok)
		}
	}
	ev, _ := parseVolumeLine(tearDownFailLog, 2026)
	if !strings.HasPrefix(ev.Error, "kubernetes.io/csi: Unmounter.TearDownAt failed") {
		t.Errorf("error %q", ev.Error)
	}
	// The kubelet's other lines about a failed TearDown (without the retry
	// line's durationBeforeRetry) are not a second failure.
	for _, line := range []string{
		strings.Replace(tearDownFailLog, "(durationBeforeRetry 500ms)", "", 1),
		`I1127 11:27:25.486147     110 kubelet.go:1] "something else" pod="x"`,
		strings.Replace(setUpLog, "57b21e63-c10d-4c64-bf1d-1efa9c69974d-csid", "short-csid", 1),
	} {
		if ev, ok := parseVolumeLine(line, 2026); ok {
			t.Errorf("parseVolumeLine(%.60q…) = %+v; want no event", line, ev)
		}
	}
}

// TestLogFollower reads a log as it grows: complete lines once, a partial
// line when it is complete, and skips a line too long to hand on.
func TestLogFollower(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kubelet.log")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fl := logFollower{path: path}
	var got []string
	var offsets []int64
	read := func() {
		t.Helper()
		if err := fl.next(func(line string, off int64) { got = append(got, line); offsets = append(offsets, off) }); err != nil {
			t.Fatal(err)
		}
	}
	_, _ = io.WriteString(f, "one\ntw")
	read()
	_, _ = io.WriteString(f, "o\n"+strings.Repeat("x", maxLogLine+10)+"\nthree\n")
	read()
	read()
	if !slices.Equal(got, []string{"one", "two", "three"}) || !slices.Equal(offsets, []int64{0, 4, int64(8 + maxLogLine + 11)}) {
		t.Fatalf("lines %q at %v", got, offsets)
	}
}

// TestDangerVolumes reads a node's mount table as the exporter's verdicts
// say: a NAS inside any volume (CSI's target mount aside) and an emptyDir
// tmpfs nodevol did not make are in danger, each volume once.
func TestDangerVolumes(t *testing.T) {
	const pods = "/var/lib/kubelet/pods/"
	line := func(point, fstype, source string) string {
		return "100 90 0:50 / " + point + " rw,relatime shared:1 - " + fstype + " " + source + " rw\n"
	}
	table := line("/var/lib/kubelet", "ext4", "/dev/vda") +
		line(pods+"a/volumes/kubernetes.io~empty-dir/mem", "tmpfs", "nv-0011aabb-ccddeeff") + // nodevol's own
		line(pods+"a/volumes/kubernetes.io~empty-dir/ed/nas", "tmpfs", "e2e-nas") + // a NAS
		line(pods+"b/volumes/kubernetes.io~empty-dir/mem", "tmpfs", "tmpfs") + // the stock kubelet's
		line(pods+"b/volumes/kubernetes.io~empty-dir/mem/nas", "ext4", "/dev/vda") + // a NAS inside it: one volume
		line(pods+"c/volumes/kubernetes.io~csi/csim/mount", "tmpfs", "nv-1") + // CSI's own target
		line(pods+"c/volumes/kubernetes.io~csi/csid/mount/nas", "tmpfs", "e2e-nas") +
		line(pods+"c/volumes/kubernetes.io~secret/sec", "tmpfs", "tmpfs") +
		line(pods+"c/volume-subpaths/ed/app/1", "ext4", "/dev/vda") +
		line(`/var/lib/kubelet/pods/d/volumes/kubernetes.io~empty-dir/with\040space/nas`, "tmpfs", "e2e-nas")
	got, err := dangerVolumes(strings.NewReader(table))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		pods + "a/volumes/kubernetes.io~empty-dir/ed",
		pods + "b/volumes/kubernetes.io~empty-dir/mem",
		pods + "c/volumes/kubernetes.io~csi/csid",
		pods + "d/volumes/kubernetes.io~empty-dir/with space",
	}
	var keys []string
	for k := range got {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	if !slices.Equal(keys, want) {
		t.Fatalf("danger %q\nwant %q", keys, want)
	}
}

func TestPercentiles(t *testing.T) {
	var xs []float64
	for i := 100; i >= 1; i-- {
		xs = append(xs, float64(i))
	}
	if p := percentilesOf(xs); p != (percentiles{N: 100, P50: 50, P99: 99, Max: 100}) {
		t.Errorf("percentilesOf(1..100) = %+v", p)
	}
	if p := percentilesOf([]float64{3}); p != (percentiles{N: 1, P50: 3, P99: 3, Max: 3}) {
		t.Errorf("percentilesOf([3]) = %+v", p)
	}
	if s := percentilesOf(nil).String(); s != "—" {
		t.Errorf("no samples: %q", s)
	}
}

// TestGrowthOf: a process that lived through is compared with its first
// sample, one restarted during the run with its smallest since; growth
// past the allowance is reported.
func TestGrowthOf(t *testing.T) {
	smp := func(at float64, pid int, rss int64, fds, gor, churned int) resourceSample {
		return resourceSample{At: at, PID: pid, RSS: rss << 20, FDs: fds, Goroutines: gor, Churned: churned, Node: "n", Component: compKubelet}
	}
	g, ok := growthOf([]resourceSample{smp(0, 1, 100, 30, 200, 0), smp(60, 1, 140, 40, 260, 100), smp(120, 1, 120, 35, 210, 200)})
	if !ok || !g.OK || g.From != "before the churn" || g.Churned != 200 {
		t.Errorf("bounded: %+v", g)
	}
	g, _ = growthOf([]resourceSample{smp(0, 1, 100, 30, 200, 0), smp(120, 1, 200, 30, 200, 200)})
	if g.OK || !strings.Contains(g.Why, "RSS grew by 100.0 MiB") {
		t.Errorf("RSS leak: %+v", g)
	}
	g, _ = growthOf([]resourceSample{smp(0, 1, 100, 30, 200, 0), smp(120, 1, 100, 80, 400, 200)})
	if g.OK || !strings.Contains(g.Why, "descriptors grew by 50") || !strings.Contains(g.Why, "goroutines grew by 200") {
		t.Errorf("descriptor and goroutine leak: %+v", g)
	}
	g, _ = growthOf([]resourceSample{smp(0, 1, 100, 30, 200, 0), smp(30, 2, 60, 20, 150, 10), smp(60, 2, 50, 20, 150, 50), smp(90, 2, 70, 22, 160, 90)})
	if !g.OK || g.RSS[0] != 50<<20 || !strings.Contains(g.From, "restart") || g.Churned != 40 {
		t.Errorf("restarted: %+v", g)
	}
	g, _ = growthOf([]resourceSample{smp(0, 1, 100, 30, -1, 0), smp(90, 1, 110, 31, -1, 90)})
	if !g.OK {
		t.Errorf("goroutines not exported: %+v", g)
	}
}

// TestFlagValue: a shim's sandbox ID is read from its command line, in
// either form of the flag.
func TestFlagValue(t *testing.T) {
	args := []string{"/usr/bin/containerd-shim-runc-v2", "-namespace", "k8s.io", "-id", "86cb89ec", "-address", "/run/c.sock"}
	if got := flagValue(args, "-id"); got != "86cb89ec" {
		t.Errorf("flagValue(-id) = %q", got)
	}
	if got := flagValue([]string{"shim", "-id=abc"}, "-id"); got != "abc" {
		t.Errorf("flagValue(-id=abc) = %q", got)
	}
	if got := flagValue([]string{"shim", "-id"}, "-id"); got != "" {
		t.Errorf("flagValue of a flag without its value = %q", got)
	}
}

// TestTransient: the soak retries what a slow or restarting API server
// answers (a client timeout, a refused connection, 5xx, 429) and nothing
// that says the request itself is wrong.
func TestTransient(t *testing.T) {
	timeout := &url.Error{Op: "Post", URL: "https://127.0.0.1:6443/api/v1/namespaces/nodevol-soak/pods", Err: context.DeadlineExceeded}
	for _, c := range []struct {
		err  error
		want bool
	}{
		{timeout, true},
		{fmt.Errorf("POST /x: %w", &StatusError{Code: 503}), true},
		{fmt.Errorf("POST /x: %w", &StatusError{Code: 429}), true},
		{errors.New("connection refused"), true},
		{fmt.Errorf("POST /x: %w", &StatusError{Code: 400}), false},
		{fmt.Errorf("GET /x: %w", ErrNotFound), false},
		{fmt.Errorf("POST /x: %w", ErrExists), false},
		{nil, false},
	} {
		if got := transient(c.err); got != c.want {
			t.Errorf("transient(%v) = %v; want %v", c.err, got, c.want)
		}
	}
}
