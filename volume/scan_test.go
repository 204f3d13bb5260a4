package volume

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/nodevol/nodevol/internal/base/fsat"
)

func TestScanVolumes(t *testing.T) {
	root := t.TempDir()
	l, _ := NewLayout(root)
	mk := func(p string) {
		if err := os.MkdirAll(filepath.Join(root, p), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	mk("pods/u1/volumes/kubernetes.io~empty-dir/cache")
	mk("pods/u1/volumes/kubernetes.io~empty-dir/mem")
	mk("pods/u1/volumes/kubernetes.io~csi/pvc-1.x")
	mk("pods/u2/volumes/kubernetes.io~empty-dir")   // plugin dir, no volumes: leftover pod
	mk("pods/u3/plugins/kubernetes.io~empty-dir/v") // no volumes dir: leftover
	mk("pods/u4/volumes/a~b~c/v")                   // bad plugin dir
	os.WriteFile(filepath.Join(root, "pods/stray-file"), nil, 0o644)
	os.Symlink("/etc", filepath.Join(root, "pods/u5"))
	os.WriteFile(filepath.Join(root, "pods/u1/volumes/kubernetes.io~empty-dir/file-vol"), nil, 0o644)

	res, err := l.ScanVolumes()
	if err != nil {
		t.Fatal(err)
	}
	var vols []string
	for _, v := range res.Volumes {
		vols = append(vols, v.PodUID+"|"+v.Plugin+"|"+v.Volume)
		if again, _ := l.VolumeDir(v.PodUID, v.Plugin, v.Volume); again != v.Path {
			t.Errorf("path %s does not round-trip (%s)", v.Path, again)
		}
	}
	want := "u1|kubernetes.io/csi|pvc-1.x u1|kubernetes.io/empty-dir|cache u1|kubernetes.io/empty-dir|file-vol u1|kubernetes.io/empty-dir|mem"
	if got := strings.Join(vols, " "); got != want {
		t.Errorf("volumes = %s\nwant %s", got, want)
	}
	var problems []string
	for _, p := range res.Problems {
		problems = append(problems, strings.TrimPrefix(p.Path, root+"/"))
	}
	if got := strings.Join(problems, " "); got != "pods/stray-file pods/u4/volumes/a~b~c pods/u5" {
		t.Errorf("problems = %s", got)
	}
	var left []string
	for _, p := range res.Leftovers {
		left = append(left, filepath.Base(p))
	}
	if got := strings.Join(left, " "); got != "u2 u3" {
		t.Errorf("leftovers = %s", got)
	}
	l2, _ := NewLayout(filepath.Join(root, "missing"))
	if _, err := l2.ScanVolumes(); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing root: %v", err)
	}
}

// TestScanVolumesFollowsNoSymlink: a symlink where a directory belongs
// below the root is never followed: a symlinked pods directory is an error
// naming it, a symlinked volumes or plugin directory a problem, and the
// volumes behind them are not listed.
func TestScanVolumesFollowsNoSymlink(t *testing.T) {
	base := t.TempDir()
	elsewhere := filepath.Join(base, "elsewhere")
	if err := os.MkdirAll(filepath.Join(elsewhere, "pods/u1/volumes/kubernetes.io~empty-dir/outside"), 0o755); err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(base, "kubelet")
	if err := os.MkdirAll(root, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(elsewhere, "pods"), filepath.Join(root, "pods")); err != nil {
		t.Fatal(err)
	}
	l, _ := NewLayout(root)
	_, err := l.ScanVolumes()
	if !errors.Is(err, fsat.ErrSymlink) || !errors.Is(err, syscall.ELOOP) || !strings.Contains(err.Error(), filepath.Join(root, "pods")) {
		t.Errorf("ScanVolumes with a symlinked pods directory = %v; want an error naming it", err)
	}

	// A root that is itself a symlink is trusted (documented).
	link := filepath.Join(base, "link-to-elsewhere")
	if err := os.Symlink(elsewhere, link); err != nil {
		t.Fatal(err)
	}
	l, _ = NewLayout(link)
	if res, err := l.ScanVolumes(); err != nil || len(res.Volumes) != 1 {
		t.Errorf("ScanVolumes through a symlinked root = %+v, %v; want the one volume", res, err)
	}

	if err := os.Remove(filepath.Join(root, "pods")); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"pods/u2/volumes", "pods/u3/volumes"} {
		if err := os.MkdirAll(filepath.Join(root, p), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Remove(filepath.Join(root, "pods/u2/volumes")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(elsewhere, "pods/u1/volumes"), filepath.Join(root, "pods/u2/volumes")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(elsewhere, "pods/u1/volumes/kubernetes.io~empty-dir"), filepath.Join(root, "pods/u3/volumes/kubernetes.io~empty-dir")); err != nil {
		t.Fatal(err)
	}
	l, _ = NewLayout(root)
	res, err := l.ScanVolumes()
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Volumes) != 0 {
		t.Errorf("volumes listed through symlinks: %+v", res.Volumes)
	}
	var problems []string
	for _, p := range res.Problems {
		problems = append(problems, strings.TrimPrefix(p.Path, root+"/")+": "+p.Err.Error())
	}
	got := strings.Join(problems, "\n")
	if len(problems) != 2 || !strings.Contains(got, "pods/u2/volumes: ") || !strings.Contains(got, "pods/u3/volumes/kubernetes.io~empty-dir: not a directory (a symlink)") {
		t.Errorf("problems:\n%s\nwant the symlinked volumes and plugin directories", got)
	}
}

// makeScanTree creates the directories and (with a trailing "/#N") N
// empty files named fNNNNN in a directory, under root.
func makeScanTree(t *testing.T, root string, specs ...string) {
	t.Helper()
	for _, spec := range specs {
		dir, n := spec, 0
		if i := strings.LastIndex(spec, "/#"); i >= 0 {
			dir = spec[:i]
			if _, err := fmt.Sscan(spec[i+2:], &n); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.MkdirAll(filepath.Join(root, dir), 0o755); err != nil {
			t.Fatal(err)
		}
		for i := range n {
			if err := os.WriteFile(filepath.Join(root, dir, fmt.Sprintf("f%05d", i)), nil, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestScanVolumesBudgetPerPod: with ScanLimits, every pod gets the same
// share and spends only its own. Hostile pods before, between and after
// the healthy ones (one directory over its bound, many directories, more
// plugin directories than a pod's share) are over budget; the healthy
// pods are listed exactly as on a node without the hostile ones; a volume
// of a hostile pod in a directory after the full one is listed too; and
// the node as a whole reads no more than its bound.
func TestScanVolumesBudgetPerPod(t *testing.T) {
	healthy := []string{
		"pods/b-healthy/volumes/kubernetes.io~empty-dir/cache",
		"pods/b-healthy/volumes/kubernetes.io~secret/token",
		"pods/d-healthy/volumes/kubernetes.io~empty-dir/cache",
		"pods/d-healthy/volumes/kubernetes.io~csi/pvc-1/mount",
	}
	hostile := []string{
		// Before: one directory over its bound, then its own volume.
		"pods/a-hostile/volumes/a.example~flood/#100",
		"pods/a-hostile/volumes/kubernetes.io~empty-dir/own",
		// Between: directories under their bound, more than its share.
		"pods/c-hostile/volumes/p.example~one/#25",
		"pods/c-hostile/volumes/p.example~two/#25",
		"pods/c-hostile/volumes/p.example~three/#25",
		"pods/c-hostile/volumes/p.example~four/#25",
		"pods/c-hostile/volumes/p.example~five/#25",
	}
	for i := range 120 { // After: more plugin directories than its share.
		hostile = append(hostile, fmt.Sprintf("pods/e-hostile/volumes/p.example~p%03d/v", i))
	}
	limits := ScanLimits{Node: 500, PodsDir: 10, Pod: 100, Dir: 30}
	list := func(res ScanResult, pod string) []string {
		var out []string
		for _, v := range res.Volumes {
			if v.PodUID == pod {
				out = append(out, v.Plugin+"|"+v.Volume)
			}
		}
		return out
	}

	alone := t.TempDir()
	makeScanTree(t, alone, healthy...)
	l, _ := NewLayout(alone)
	want, err := l.ScanVolumes(limits)
	if err != nil || want.Incomplete || len(want.Problems) != 0 {
		t.Fatalf("healthy pods alone: %+v, %v; want a complete scan", want, err)
	}

	root := t.TempDir()
	makeScanTree(t, root, append(healthy, hostile...)...)
	l, _ = NewLayout(root)
	res, err := l.ScanVolumes(limits)
	if err != nil {
		t.Fatal(err)
	}
	for _, pod := range []string{"b-healthy", "d-healthy"} {
		if got, want := list(res, pod), list(want, pod); !slices.Equal(got, want) || len(got) != 2 {
			t.Errorf("pod %s among hostile pods: volumes %v; want %v, as without them", pod, got, want)
		}
	}
	if got := list(res, "a-hostile"); !slices.Contains(got, "kubernetes.io/empty-dir|own") {
		t.Errorf("the hostile pod's own volume after its full directory was not listed: %v", got)
	}
	var over []string
	for _, p := range res.OverBudget {
		over = append(over, filepath.Base(p))
	}
	if got := strings.Join(over, " "); got != "a-hostile c-hostile e-hostile" || !res.Incomplete {
		t.Errorf("over budget: %s (incomplete %v); want a-hostile c-hostile e-hostile, incomplete", got, res.Incomplete)
	}
	for _, p := range res.Problems {
		if !errors.Is(p.Err, ErrTooManyEntries) || !strings.Contains(p.Path, "-hostile/") {
			t.Errorf("problem %s: %v; want only the hostile pods', each matching ErrTooManyEntries", p.Path, p.Err)
		}
	}
	share := limits.PodShare(5, 5) // (500-5)/5 = 99
	used := 0
	for uid, b := range res.Budgets {
		if b.Used() > share {
			t.Errorf("pod %s used %d entries; want at most its share, %d", uid, b.Used(), share)
		}
		used += b.Used()
	}
	if used+5 > limits.Node {
		t.Errorf("the scan read %d entries; want at most %d", used+5, limits.Node)
	}
	if b := res.Budgets["b-healthy"]; b.Spent() || b.Used() != 4 {
		t.Errorf("the healthy pod's budget: used %d, spent %v; want 4 (2 plugin directories, 2 volumes), not spent", b.Used(), b.Spent())
	}
	// What the caller reads with a pod's budget counts against it.
	b := res.Budgets["b-healthy"]
	for i := 0; b.Take(0) == nil; i++ { // each from a directory of its own

		if i > share {
			t.Fatalf("a pod's budget gave more than its share, %d", share)
		}
	}
	if err := b.Take(0); !errors.Is(err, ErrTooManyEntries) || !b.Spent() {
		t.Errorf("Take past the budget = %v (spent %v); want ErrTooManyEntries, spent", err, b.Spent())
	}

	// Without limits, everything is read.
	res, err = l.ScanVolumes()
	if err != nil || res.Incomplete || res.Budgets != nil || len(res.Volumes) != 4+101+125+120 {
		t.Errorf("ScanVolumes() without limits: %d volumes, incomplete %v, %v; want every one", len(res.Volumes), res.Incomplete, err)
	}
}

// TestScanVolumesPodsDirBound: the pods directory gives at most PodsDir
// entries; past them the scan is incomplete (no pod is over budget: the
// bound is the node's).
func TestScanVolumesPodsDirBound(t *testing.T) {
	root := t.TempDir()
	for i := range 12 {
		makeScanTree(t, root, fmt.Sprintf("pods/p%02d/volumes/kubernetes.io~empty-dir/v", i))
	}
	l, _ := NewLayout(root)
	res, err := l.ScanVolumes(ScanLimits{PodsDir: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Volumes) != 10 || !res.Incomplete || len(res.OverBudget) != 0 || len(res.Problems) != 1 ||
		res.Problems[0].Path != filepath.Join(root, "pods") || !errors.Is(res.Problems[0].Err, ErrTooManyEntries) {
		t.Errorf("12 pods, PodsDir 10: %d volumes, incomplete %v, over budget %v, problems %v; want 10, incomplete, none, one on the pods directory",
			len(res.Volumes), res.Incomplete, res.OverBudget, res.Problems)
	}
}

func TestScanLimitsPodShare(t *testing.T) {
	for _, c := range []struct {
		limits         ScanLimits
		podsRead, pods int
		want           int
	}{
		{DefaultScanLimits(), 110, 110, 594},
		{DefaultScanLimits(), 1000, 1000, 64},
		{DefaultScanLimits(), 3, 3, 4096},
		{DefaultScanLimits(), 0, 0, 4096},
		{ScanLimits{Node: 100}, 10, 3, 30},
		{ScanLimits{Node: 5}, 10, 3, 0},
		{ScanLimits{Pod: 7}, 10, 3, 7},
		{ScanLimits{}, 10, 3, -1},
	} {
		if got := c.limits.PodShare(c.podsRead, c.pods); got != c.want {
			t.Errorf("%+v.PodShare(%d, %d) = %d; want %d", c.limits, c.podsRead, c.pods, got, c.want)
		}
	}
}
