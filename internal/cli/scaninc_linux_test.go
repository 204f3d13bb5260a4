package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
	"github.com/nodevol/nodevol/internal/testsupport/nodefixture"
)

// podUID is the UID nodefixture gives pod p.
func podUID(p int) string { return fmt.Sprintf("%08x-1d4e-4b7a-9c21-%012x", p, p) }

// emptyDirOf is the path of the emptyDir vol of pod p under root.
func emptyDirOf(root string, p int, vol string) string {
	return filepath.Join(root, "pods", podUID(p), "volumes", "kubernetes.io~empty-dir", vol)
}

// newTestIncrementalScan is an incrementalScan whose whole scans never
// come due on their own, and whose stamps count as settled at once: the
// fixture was made a moment ago, and waiting settleAfter would make every
// scan of the test re-read every pod. Each change a test makes is made
// after a tick of the clock that stamps ctimes (waitTick), so that it
// cannot leave a ctime equal to the one stamped.
func newTestIncrementalScan() *incrementalScan {
	c := newIncrementalScan(clocktesting.NewFakeClock(time.Now()), time.Hour, 0)
	c.settleAfter = 0
	return c
}

// waitTick sleeps past the coarse clock the kernel stamps ctimes with.
func waitTick() { time.Sleep(20 * time.Millisecond) }

// incScan scans root with c and checks that the report is the one a whole
// scan gives now.
func incScan(t *testing.T, c *incrementalScan, root string) *scanReport {
	t.Helper()
	got, err := c.scan(root)
	if err != nil {
		t.Fatal(err)
	}
	want, err := scanRootWithin(root, c.limits)
	if err != nil {
		t.Fatal(err)
	}
	if g, w := reportText(got), reportText(want); g != w {
		t.Fatalf("incremental scan (%+v) differs from a whole scan:\n%s", c.last, lineDiff(g, w))
	}
	return got
}

// reportText is everything a report says, sorted, one line per item.
func reportText(s *scanReport) string {
	var lines []string
	for _, v := range s.volumes {
		lines = append(lines, fmt.Sprintf("volume %s %s %s %q nested=%v subpaths=%v medium=%s mp=%v safe=%v", v.Path, v.Verdict, v.ReasonCode, v.Reason, v.NestedMounts, v.Subpaths, v.Medium, v.MountPoint, v.SafeToRemove))
	}
	for _, p := range s.problems {
		lines = append(lines, fmt.Sprintf("problem %s %s %v", p.Problem, p.Error, p.OverBudget))
	}
	for _, l := range s.leftovers {
		lines = append(lines, "leftover "+l.Leftover)
	}
	slices.Sort(lines)
	lines = append(lines, fmt.Sprintf("incomplete=%v overBudget=%v", s.incomplete, s.overBudget))
	return strings.Join(lines, "\n")
}

// lineDiff is the lines only in a ("-") and only in b ("+").
func lineDiff(a, b string) string {
	as, bs := strings.Split(a, "\n"), strings.Split(b, "\n")
	var out []string
	for _, l := range as {
		if !slices.Contains(bs, l) {
			out = append(out, "- "+l)
		}
	}
	for _, l := range bs {
		if !slices.Contains(as, l) {
			out = append(out, "+ "+l)
		}
	}
	return strings.Join(out, "\n")
}

func verdictOf(t testing.TB, s *scanReport, path string) scanVerdict {
	t.Helper()
	for _, v := range s.volumes {
		if v.Path == path {
			return v.Verdict
		}
	}
	t.Fatalf("no volume %s in the scan", path)
	return 0
}

// TestIncrementalScanSeesMountsInVerifiedVolumes: a NAS mounted in a
// volume verified clean is reported by the next scan, which re-examines
// that pod alone; unmounted, the volume is ok again.
func TestIncrementalScanSeesMountsInVerifiedVolumes(t *testing.T) {
	n := nodefixture.Shape{Pods: 20, Mounted: true}
	root := scanNode(t, n)
	c := newTestIncrementalScan()
	rep := incScan(t, c, root)
	wantNode(t, rep, n)
	if !c.last.full {
		t.Fatalf("first scan: %+v; want a whole scan", c.last)
	}
	rep = incScan(t, c, root)
	if c.last.full || c.last.podsReexamined != 0 {
		t.Fatalf("scan with nothing changed: %+v; want nothing re-examined", c.last)
	}
	cache := emptyDirOf(root, 7, "cache")
	if v := verdictOf(t, rep, cache); v != verdictOK {
		t.Fatalf("%s: %s before the NAS; want ok", cache, v)
	}
	nas := filepath.Join(cache, "nas")
	if err := os.Mkdir(nas, 0o755); err != nil {
		t.Fatal(err)
	}
	mounttest.Tmpfs(t, nas, "size=64k")
	rep = incScan(t, c, root)
	if v := verdictOf(t, rep, cache); v != verdictDanger {
		t.Errorf("%s with a NAS mounted after a clean verdict: %s; want danger", cache, v)
	}
	if c.last.full || c.last.podsReexamined != 1 {
		t.Errorf("scan after one mount: %+v; want one pod re-examined", c.last)
	}
	mounttest.Unmount(t, nas)
	rep = incScan(t, c, root)
	if v := verdictOf(t, rep, cache); v != verdictOK {
		t.Errorf("%s after the unmount: %s; want ok", cache, v)
	}
}

// TestIncrementalScanSeesRenamedMounts: renames wake no watch of the mount
// table, and change no stamped directory when they happen inside a
// volume. A directory holding a NAS, outside the kubelet root, is swapped
// (RENAME_EXCHANGE) with a subdirectory of a volume verified clean: the
// next scan sees the NAS's new mount point in the table and reports the
// volume in danger; swapped back, ok.
func TestIncrementalScanSeesRenamedMounts(t *testing.T) {
	n := nodefixture.Shape{Pods: 20, Mounted: true}
	root := scanNode(t, n)
	outside := filepath.Join(filepath.Dir(root), "outside")
	nas := filepath.Join(outside, "nas")
	if err := os.MkdirAll(nas, 0o755); err != nil {
		t.Fatal(err)
	}
	mounttest.Tmpfs(t, nas, "size=64k")
	cache := emptyDirOf(root, 9, "cache")
	inner := filepath.Join(cache, "inner")
	if err := os.Mkdir(inner, 0o755); err != nil {
		t.Fatal(err)
	}
	c := newTestIncrementalScan()
	rep := incScan(t, c, root)
	if v := verdictOf(t, rep, cache); v != verdictOK {
		t.Fatalf("%s: %s; want ok", cache, v)
	}
	incScan(t, c, root)
	waitTick()
	swap := func() {
		t.Helper()
		if err := unix.Renameat2(unix.AT_FDCWD, outside, unix.AT_FDCWD, inner, unix.RENAME_EXCHANGE); err != nil {
			t.Fatal(err)
		}
	}
	swap()
	rep = incScan(t, c, root)
	if v := verdictOf(t, rep, cache); v != verdictDanger {
		t.Errorf("%s with a NAS renamed into it: %s; want danger", cache, v)
	}
	if c.last.full || c.last.podsReexamined != 1 || c.last.changes != 1 {
		t.Errorf("scan after the rename: %+v; want one changed mount, one pod re-examined", c.last)
	}
	waitTick()
	swap()
	rep = incScan(t, c, root)
	if v := verdictOf(t, rep, cache); v != verdictOK {
		t.Errorf("%s with the NAS renamed out: %s; want ok", cache, v)
	}
}

// TestIncrementalScanSeesSwappedVolumes: two volume directories of
// different pods swapped, one of them holding a NAS: the stamps of both
// plugin directories change, and the mount's mount point too; both pods
// are re-examined and the danger follows the NAS.
func TestIncrementalScanSeesSwappedVolumes(t *testing.T) {
	n := nodefixture.Shape{Pods: 20, Mounted: true}
	root := scanNode(t, n)
	a, b := emptyDirOf(root, 0, "cache"), emptyDirOf(root, 12, "cache")
	if err := os.Mkdir(filepath.Join(a, "nas"), 0o755); err != nil {
		t.Fatal(err)
	}
	mounttest.Tmpfs(t, filepath.Join(a, "nas"), "size=64k")
	c := newTestIncrementalScan()
	rep := incScan(t, c, root)
	if va, vb := verdictOf(t, rep, a), verdictOf(t, rep, b); va != verdictDanger || vb != verdictOK {
		t.Fatalf("before the swap: %s %s, %s %s; want danger, ok", a, va, b, vb)
	}
	waitTick()
	if err := unix.Renameat2(unix.AT_FDCWD, a, unix.AT_FDCWD, b, unix.RENAME_EXCHANGE); err != nil {
		t.Fatal(err)
	}
	rep = incScan(t, c, root)
	if va, vb := verdictOf(t, rep, a), verdictOf(t, rep, b); va != verdictOK || vb != verdictDanger {
		t.Errorf("after the swap: %s %s, %s %s; want ok, danger", a, va, b, vb)
	}
	if c.last.full || c.last.podsReexamined != 2 {
		t.Errorf("scan after the swap: %+v; want two pods re-examined", c.last)
	}
}

// TestIncrementalScanNewPodsAndVolumes: a pod that appears with a NAS in
// a volume, and a volume directory added to a pod verified before, are
// in the next scan; a pod removed is gone from it.
func TestIncrementalScanNewPodsAndVolumes(t *testing.T) {
	n := nodefixture.Shape{Pods: 20, Mounted: true}
	root := scanNode(t, n)
	c := newTestIncrementalScan()
	c.limits.Node = 1 << 24 // every pod's share is the per-pod bound, whatever the number of pods
	incScan(t, c, root)
	waitTick()
	// A new pod, with one volume.
	uid := "ffffffff-1d4e-4b7a-9c21-ffffffffffff"
	vol := filepath.Join(root, "pods", uid, "volumes", "kubernetes.io~empty-dir", "scratch")
	if err := os.MkdirAll(filepath.Join(vol, "nas"), 0o755); err != nil {
		t.Fatal(err)
	}
	mounttest.Tmpfs(t, filepath.Join(vol, "nas"), "size=64k")
	// A new volume directory of pod 3.
	extra := filepath.Join(root, "pods", podUID(3), "volumes", "kubernetes.io~secret", "extra")
	if err := os.Mkdir(extra, 0o755); err != nil {
		t.Fatal(err)
	}
	rep := incScan(t, c, root)
	if v := verdictOf(t, rep, vol); v != verdictDanger {
		t.Errorf("%s, a new pod's volume with a NAS: %s; want danger", vol, v)
	}
	verdictOf(t, rep, extra)
	if c.last.full {
		t.Errorf("scan after a new pod: %+v; want no whole scan (the share is the same)", c.last)
	}
	waitTick()
	mounttest.Unmount(t, filepath.Join(vol, "nas"))
	if err := os.RemoveAll(filepath.Join(root, "pods", uid)); err != nil {
		t.Fatal(err)
	}
	rep = incScan(t, c, root)
	for _, v := range rep.volumes {
		if v.PodUID == uid {
			t.Errorf("volume %s of a removed pod still in the scan", v.Path)
		}
	}
}

// TestIncrementalScanHostilePodCannotBlind: a pod that floods its
// directories with entries is over its budget at every scan, re-read
// within its own share each time, and a NAS mounted into another pod's
// volume meanwhile is reported by the next scan.
func TestIncrementalScanHostilePodCannotBlind(t *testing.T) {
	n := nodefixture.Shape{Pods: 20, Mounted: true}
	root := scanNode(t, n)
	c := newTestIncrementalScan()
	c.limits.Node = 20 * 40 // a share of about 40 entries a pod
	incScan(t, c, root)
	hostile := filepath.Join(root, "pods", podUID(5), "volumes", "kubernetes.io~empty-dir")
	flood := func(from int) {
		t.Helper()
		for i := from; i < from+200; i++ {
			if err := os.Mkdir(filepath.Join(hostile, fmt.Sprintf("junk%04d", i)), 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	waitTick()
	flood(0)
	rep := incScan(t, c, root)
	if !rep.incomplete || len(rep.overBudget) != 1 {
		t.Fatalf("scan with a flooding pod: incomplete %v, over budget %v; want that pod", rep.incomplete, rep.overBudget)
	}
	cache := emptyDirOf(root, 11, "cache")
	nas := filepath.Join(cache, "nas")
	if err := os.Mkdir(nas, 0o755); err != nil {
		t.Fatal(err)
	}
	waitTick()
	flood(200)
	mounttest.Tmpfs(t, nas, "size=64k")
	rep = incScan(t, c, root)
	if v := verdictOf(t, rep, cache); v != verdictDanger {
		t.Errorf("%s with a NAS beside a flooding pod: %s; want danger", cache, v)
	}
	if c.last.podsReexamined != 2 {
		t.Errorf("scan: %+v; want the flooding pod and the NAS's re-examined", c.last)
	}
}

// TestIncrementalScanUnsettledStampsRereadPods: a directory changed less
// than settleAfter ago proves nothing (a change within the same tick of
// the ctime clock would leave it equal): its pod is re-read at every scan
// until it settles.
func TestIncrementalScanUnsettledStampsRereadPods(t *testing.T) {
	root := scanNode(t, nodefixture.Shape{Pods: 5})
	c := newTestIncrementalScan()
	incScan(t, c, root)
	c.settleAfter = time.Hour // every stamp made by the fixture is recent
	if err := os.Mkdir(filepath.Join(root, "pods", podUID(2), "volumes", "kubernetes.io~secret", "extra"), 0o755); err != nil {
		t.Fatal(err)
	}
	incScan(t, c, root)
	for range 2 {
		incScan(t, c, root)
		if c.last.podsReexamined != 5 {
			t.Errorf("scan with every stamp recent: %+v; want every pod re-read", c.last)
		}
	}
}

// TestIncrementalScanMountChangeBetweenStamps: a scan for a mount change
// soon after the pods' stamps were checked does not check them again, but
// still examines the pods the change lies in, a pod new since the last
// scan included (the pods directory is always stamped).
func TestIncrementalScanMountChangeBetweenStamps(t *testing.T) {
	root := scanNode(t, nodefixture.Shape{Pods: 20, Mounted: true})
	c := newTestIncrementalScan()
	c.limits.Node = 1 << 24 // the share stays the same as pods come
	c.stampEvery = time.Hour
	incScan(t, c, root)
	waitTick()
	uid := "eeeeeeee-1d4e-4b7a-9c21-eeeeeeeeeeee"
	vol := filepath.Join(root, "pods", uid, "volumes", "kubernetes.io~empty-dir", "scratch")
	if err := os.MkdirAll(filepath.Join(vol, "nas"), 0o755); err != nil {
		t.Fatal(err)
	}
	mounttest.Tmpfs(t, filepath.Join(vol, "nas"), "size=64k")
	rep, err := c.scan(root)
	if err != nil {
		t.Fatal(err)
	}
	if v := verdictOf(t, rep, vol); v != verdictDanger {
		t.Errorf("%s, a new pod's volume with a NAS, between stamps: %s; want danger", vol, v)
	}
	if c.last.full || c.last.podsReexamined != 1 {
		t.Errorf("scan: %+v; want the new pod alone examined", c.last)
	}
}

// TestIncrementalScanReplacedPodsDir: a pods directory swapped for another
// one holding the same pod UIDs (the kept verdicts are about the old one)
// makes the next scan a whole one.
func TestIncrementalScanReplacedPodsDir(t *testing.T) {
	root := scanNode(t, nodefixture.Shape{Pods: 5})
	c := newTestIncrementalScan()
	c.stampEvery = time.Hour // a mount change's scan: the pods' stamps are not due
	incScan(t, c, root)
	pods := filepath.Join(root, "pods")
	other := filepath.Join(filepath.Dir(root), "other-pods")
	if err := os.Mkdir(other, 0o755); err != nil {
		t.Fatal(err)
	}
	vol := filepath.Join(other, podUID(1), "volumes", "kubernetes.io~empty-dir", "cache")
	if err := os.MkdirAll(vol, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Renameat2(unix.AT_FDCWD, pods, unix.AT_FDCWD, other, unix.RENAME_EXCHANGE); err != nil {
		t.Fatal(err)
	}
	rep := incScan(t, c, root)
	if !c.last.full {
		t.Errorf("scan after the pods directory was replaced: %+v; want a whole scan", c.last)
	}
	if len(rep.volumes) != 1 {
		t.Errorf("scan of the new pods directory: %d volumes; want its one", len(rep.volumes))
	}
}

// TestIncrementalScanSeesOwnMountBoundElsewhere: an emptyDir's own tmpfs
// bound a second time outside the kubelet root (its teardown would leave
// that mount behind: a danger) is a change outside every pod's directory;
// it is attributed to the volume by the tmpfs's source, which SetUp made
// unique, and the next scan agrees with a whole one.
func TestIncrementalScanSeesOwnMountBoundElsewhere(t *testing.T) {
	root := scanNode(t, nodefixture.Shape{Pods: 20, Mounted: true})
	shm := emptyDirOf(root, 2, "shm") // a Memory emptyDir, its own tmpfs mounted
	c := newTestIncrementalScan()
	rep := incScan(t, c, root)
	if v := verdictOf(t, rep, shm); v != verdictInUse {
		t.Fatalf("%s: %s; want in-use (its own tmpfs)", shm, v)
	}
	elsewhere := filepath.Join(filepath.Dir(root), "elsewhere")
	if err := os.Mkdir(elsewhere, 0o755); err != nil {
		t.Fatal(err)
	}
	mounttest.Bind(t, shm, elsewhere)
	rep = incScan(t, c, root)
	if v := verdictOf(t, rep, shm); v == verdictInUse || v == verdictOK {
		t.Errorf("%s with its tmpfs bound elsewhere too: %s; want it unhealthy", shm, v)
	}
	if c.last.full || c.last.podsReexamined != 1 {
		t.Errorf("scan after the bind: %+v; want that pod alone re-examined", c.last)
	}
}
