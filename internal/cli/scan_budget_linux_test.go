package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
	"github.com/nodevol/nodevol/volume"
)

// Pod UIDs in the order a scan reads them (sorted by name), so that the
// hostile pods come before, between and after the healthy ones.
const (
	hostileFirstUID  = "00000000-0000-4000-8000-000000000001"
	healthyFirstUID  = "11111111-0000-4000-8000-000000000001"
	hostileMiddleUID = "22222222-0000-4000-8000-000000000001"
	healthyMiddleUID = "33333333-0000-4000-8000-000000000001"
	healthyLastUID   = "55555555-0000-4000-8000-000000000001"
	hostileLastUID   = "99999999-0000-4000-8000-000000000001"
)

// makeEntries creates n empty files named prefix%05d in dir (made with its
// parents), fast: one openat each, relative to dir.
func makeEntries(t *testing.T, dir, prefix string, n int) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	for i := range n {
		f, err := unix.Openat(fd, fmt.Sprintf("%s%05d", prefix, i), unix.O_CREAT|unix.O_WRONLY|unix.O_CLOEXEC, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		unix.Close(f)
	}
}

// healthyPodWithNAS sets up a Default emptyDir "cache" in pod uid with a
// "NAS" (a tmpfs) mounted inside it: a volume in danger.
func healthyPodWithNAS(t *testing.T, k *kubelet, uid string) string {
	t.Helper()
	cache := k.setUp(t, uid, "cache", volume.EmptyDirSource{})
	nas := filepath.Join(cache, "nas")
	if err := os.Mkdir(nas, 0o755); err != nil {
		t.Fatal(err)
	}
	mounttest.Tmpfs(t, nas, "size=1m")
	return cache
}

// wantDanger checks that each path is a volume of rep in danger, for a
// mount nested in it.
func wantDanger(t *testing.T, rep *scanReport, paths ...string) {
	t.Helper()
	for _, p := range paths {
		i := slices.IndexFunc(rep.volumes, func(v *scanVolume) bool { return v.Path == p })
		switch {
		case i < 0:
			t.Errorf("%s (a NAS inside) was not examined: no such volume among %d", p, len(rep.volumes))
		case rep.volumes[i].ReasonCode != reasonNestedMount:
			t.Errorf("%s (a NAS inside) is %s (%s): %s; want danger (nested-mount)", p, rep.volumes[i].Verdict, rep.volumes[i].ReasonCode, rep.volumes[i].Reason)
		}
	}
}

// wantOverBudget checks that rep is incomplete, with exactly the pods uids
// over budget, each with a problem (overBudget) inside its pod directory.
func wantOverBudget(t *testing.T, k *kubelet, rep *scanReport, uids ...string) {
	t.Helper()
	var want []string
	for _, uid := range uids {
		p, err := k.layout.PodDir(uid)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, p)
		if !slices.ContainsFunc(rep.problems, func(pr scanProblem) bool {
			return pr.OverBudget && strings.HasPrefix(pr.Problem, p+"/")
		}) {
			t.Errorf("no over-budget problem inside %s; problems: %v", p, rep.problems)
		}
	}
	slices.Sort(want)
	if !slices.Equal(rep.overBudget, want) {
		t.Errorf("pods over budget = %v; want %v", rep.overBudget, want)
	}
	if !rep.incomplete || rep.code() != ExitError {
		t.Errorf("incomplete = %v, exit code %d; want an incomplete scan, exit %d", rep.incomplete, rep.code(), ExitError)
	}
}

// TestScanHostilePodsCannotHideOthers: each pod spends only its own
// budget of entries, so a pod that writes 70,000 entries into its own pod
// directory cannot leave the pods after it unexamined (under a node-wide
// bound of 65,536 entries a NAS in another pod's emptyDir would go
// unreported, the danger gauge read 0, and the alert never fire). Three
// hostile pods (before, between and after the healthy ones; one floods
// one directory, one many plugin directories, one its subPath tree, each
// with more than 70,000 entries) are reported over budget, every healthy
// pod's NAS is in danger, a NAS in a hostile pod's own emptyDir listed
// before its flood too, and the scan says it is incomplete: in its exit
// status and its JSON (the agent's metrics of an incomplete scan:
// internal/agent's TestServeIncompleteScan).
func TestScanHostilePodsCannotHideOthers(t *testing.T) {
	mounttest.RequireMounts(t)
	k := newKubelet(t, mounttest.MemTempDir(t))
	vols := func(uid string) string { return filepath.Join(k.root, "pods", uid, "volumes") }

	// Before: 70,001 entries in one plugin directory; its own emptyDir,
	// listed before the flood, holds a NAS.
	hostileOwn := healthyPodWithNAS(t, k, hostileFirstUID)
	makeEntries(t, filepath.Join(vols(hostileFirstUID), "kubernetes.io~secret"), "s", 70001)
	// Between: 70 plugin directories of 1,000 entries each.
	for i := range 70 {
		makeEntries(t, filepath.Join(vols(hostileMiddleUID), fmt.Sprintf("attacker.example~p%02d", i)), "v", 1000)
	}
	// After: a volume whose subPath tree holds 70 containers of 1,000
	// entries each.
	k.setUp(t, hostileLastUID, "data", volume.EmptyDirSource{})
	for i := range 70 {
		makeEntries(t, filepath.Join(k.root, "pods", hostileLastUID, "volume-subpaths", "data", fmt.Sprintf("c%02d", i)), "", 1000)
	}
	healthy := []string{
		healthyPodWithNAS(t, k, healthyFirstUID),
		healthyPodWithNAS(t, k, healthyMiddleUID),
		healthyPodWithNAS(t, k, healthyLastUID),
	}

	rep, err := scanRoot(k.root)
	if err != nil {
		t.Fatal(err)
	}
	wantDanger(t, rep, append(healthy, hostileOwn)...)
	wantOverBudget(t, k, rep, hostileFirstUID, hostileMiddleUID, hostileLastUID)
	if got := rep.count(verdictDanger); got != 4 {
		t.Errorf("%d volumes in danger; want 4 (the NASes)", got)
	}
	held := len(rep.volumes) + len(rep.problems)
	for i := range rep.volumes {
		held += len(rep.volumes[i].Subpaths)
	}
	if limit := volume.DefaultScanLimits().Node; held > limit {
		t.Errorf("the report holds %d volumes, problems and subpath entries; want at most the node's %d", held, limit)
	}

	// The command: exit status 2, the volumes in danger, the problems
	// marked over budget.
	var stdout, stderr bytes.Buffer
	if code := run([]string{"scan", "--json", "--root", k.root}, &stdout, &stderr); code != ExitError {
		t.Errorf("scan --json exit %d; want %d (incomplete)\nstderr: %s", code, ExitError, stderr.String())
	}
	danger, over := 0, 0
	for line := range strings.Lines(stdout.String()) {
		var obj struct {
			Verdict    string
			OverBudget bool
		}
		if err := json.Unmarshal([]byte(line), &obj); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		if obj.Verdict == "danger" {
			danger++
		}
		if obj.OverBudget {
			over++
		}
	}
	if danger != 4 || over < 3 {
		t.Errorf("scan --json: %d volumes in danger, %d over-budget problems; want 4 and at least 3", danger, over)
	}
	stdout.Reset()
	if code := run([]string{"scan", "--root", k.root}, &stdout, &stderr); code != ExitError ||
		!strings.Contains(stdout.String(), "INCOMPLETE: 3 pods over their budget") {
		t.Errorf("scan exit %d, summary %q; want exit %d and INCOMPLETE: 3 pods over their budget", code, lastLine(stdout.String()), ExitError)
	}

}

// lastLine is the last line of s.
func lastLine(s string) string {
	s = strings.TrimRight(s, "\n")
	return s[strings.LastIndexByte(s, '\n')+1:]
}

// TestScanSubpathTreeWithinBudget: a volume's subPath tree
// (volume-subpaths/<volume>/<container>/<index>) is read within the pod's
// budget, so a pod that writes 20,000 entries there does not put 20,000
// entries, each with its path, in every report of the agent: the pod is
// over budget, its volume could not be examined, and a healthy pod after
// it is examined.
func TestScanSubpathTreeWithinBudget(t *testing.T) {
	mounttest.RequireMounts(t)
	k := newKubelet(t, mounttest.MemTempDir(t))
	k.setUp(t, hostileFirstUID, "data", volume.EmptyDirSource{})
	for i := range 20 {
		makeEntries(t, filepath.Join(k.root, "pods", hostileFirstUID, "volume-subpaths", "data", fmt.Sprintf("c%02d", i)), "", 1000)
	}
	cache := healthyPodWithNAS(t, k, healthyFirstUID)
	rep, err := scanRoot(k.root)
	if err != nil {
		t.Fatal(err)
	}
	entries := 0
	for i := range rep.volumes {
		entries += len(rep.volumes[i].Subpaths)
	}
	if limit := volume.DefaultScanLimits().Pod; entries > limit {
		t.Errorf("the report holds %d subpath entries of one pod; want at most its budget, %d", entries, limit)
	}
	wantDanger(t, rep, cache)
	wantOverBudget(t, k, rep, hostileFirstUID)
	data := k.dir(t, hostileFirstUID, "kubernetes.io/empty-dir", "data")
	i := slices.IndexFunc(rep.volumes, func(v *scanVolume) bool { return v.Path == data })
	if i < 0 || rep.volumes[i].Verdict != verdictError || !strings.Contains(rep.volumes[i].Reason, "budget") {
		t.Errorf("the volume whose subPath tree is over budget: %+v; want verdict error, saying why", rep.volumes[max(i, 0)])
	}
}

// TestScanManyHostilePods: an attacker with many pods spends each pod's
// share and no more: with 20 hostile pods among 3 healthy ones, the node
// reads no more than its bound, and each healthy pod (which needs a few
// entries) is examined whole. Limits are lowered to keep the tree small.
func TestScanManyHostilePods(t *testing.T) {
	mounttest.RequireMounts(t)
	k := newKubelet(t, mounttest.MemTempDir(t))
	limits := volume.ScanLimits{Node: 3000, PodsDir: 100, Pod: 1000, Dir: 200}
	var hostile []string
	for i := range 20 {
		uid := fmt.Sprintf("%02x000000-0000-4000-8000-000000000002", i*12)
		hostile = append(hostile, uid)
		for j := range 5 {
			makeEntries(t, filepath.Join(k.root, "pods", uid, "volumes", fmt.Sprintf("attacker.example~p%d", j)), "v", 150)
		}
	}
	var healthy []string
	for _, uid := range []string{"05000000-0000-4000-8000-000000000003", "7f000000-0000-4000-8000-000000000003", "ff000000-0000-4000-8000-000000000003"} {
		healthy = append(healthy, healthyPodWithNAS(t, k, uid))
	}
	rep, err := scanRootWithin(k.root, limits)
	if err != nil {
		t.Fatal(err)
	}
	wantDanger(t, rep, healthy...)
	wantOverBudget(t, k, rep, hostile...)
	// Every entry read is at most one volume or problem; each pod adds at
	// most one problem per directory a bound stopped (6 a pod here).
	if held, limit := len(rep.volumes)+len(rep.problems), limits.Node+6*len(hostile); held > limit {
		t.Errorf("the report holds %d volumes and problems after 15,000 hostile entries; want at most %d", held, limit)
	}
}

// TestScanBoundsEntries: whoever can write into a pod directory makes
// pods/<uid>/volumes/<plugin>/<n> for any n (100,000 files with long names
// would take 150 MB of heap if a scan held them all, and each is
// examined; an agent with a memory limit would be OOM-killed on every
// restart). The listing stops at the scan's limits (lowered here) and says
// so as a problem, the scan exits non-zero, and the pod after the full one
// is still examined.
func TestScanBoundsEntries(t *testing.T) {
	limits := volume.ScanLimits{Node: 1000}
	root := mounttest.RealTempDir(t)
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
	if !slices.ContainsFunc(rep.volumes, func(v *scanVolume) bool { return v.PodUID == testUID2 }) {
		t.Errorf("the pod after the full one was not examined")
	}
	if rep.code() == ExitOK {
		t.Errorf("scan exit code = %d; want non-zero for an incomplete scan", rep.code())
	}
}

// TestScanEmptyDirMetadataWithinBudget: an emptyDir's metadata directory
// (plugins/kubernetes.io~empty-dir/<volume>) is read within its pod's
// budget, so a pod that writes 1,000 entries into each of eight such
// directories does not make every scan read 8,000 of them: the pod is over
// budget, its volumes that could not be examined say why, and a healthy
// pod after it is examined. The entries are named as the temporary files
// of an interrupted record write (".nodevol.json.tmp-" and 16 hex digits),
// which the listing reads on past (up to 1,024); other names stop it at
// the tenth.
func TestScanEmptyDirMetadataWithinBudget(t *testing.T) {
	mounttest.RequireMounts(t)
	k := newKubelet(t, mounttest.MemTempDir(t))
	var vols []string
	for i := range 8 {
		name := fmt.Sprintf("data%d", i)
		vols = append(vols, k.setUp(t, hostileFirstUID, name, volume.EmptyDirSource{}))
		meta := filepath.Join(k.root, "pods", hostileFirstUID, "plugins", "kubernetes.io~empty-dir", name)
		if _, err := os.Stat(filepath.Join(meta, "nodevol.json")); err != nil {
			t.Fatalf("not the metadata directory: %v", err)
		}
		makeEntries(t, meta, ".nodevol.json.tmp-00000000000", 1000)
	}
	cache := healthyPodWithNAS(t, k, healthyFirstUID)
	rep, err := scanRoot(k.root)
	if err != nil {
		t.Fatal(err)
	}
	wantDanger(t, rep, cache)
	wantOverBudget(t, k, rep, hostileFirstUID)
	stopped := 0
	for _, p := range vols {
		i := slices.IndexFunc(rep.volumes, func(v *scanVolume) bool { return v.Path == p })
		if i < 0 {
			t.Errorf("%s: not in the report", p)
			continue
		}
		if v := rep.volumes[i]; v.Verdict == verdictError && strings.Contains(v.Reason, "budget") {
			stopped++
		}
	}
	// 4,096 entries a pod: four directories of 1,000 are read, the fifth
	// spends the rest, and the last three are not listed.
	if stopped != 4 {
		t.Errorf("%d of the hostile pod's 8 volumes stopped by its budget; want 4", stopped)
	}
}
