package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
	"github.com/nodevol/nodevol/volume"
)

// TestScanHealthyPodSpendingItsWholeShare: an emptyDir's record and ready
// marker are paid for with the volume's own entry, so a healthy pod whose
// listing takes exactly its share (one plugin directory and its volumes)
// is not over budget, and every volume of it has its verdict, while a
// hostile pod beside it (before and after it in the scan's order) floods
// its own metadata directories and is the only one over budget.
func TestScanHealthyPodSpendingItsWholeShare(t *testing.T) {
	mounttest.RequireMounts(t)
	k := newKubelet(t, mounttest.MemTempDir(t))
	const vols = 6
	limits := volume.ScanLimits{Pod: vols + 1, Dir: 64}
	var healthy []string
	for i := range vols {
		healthy = append(healthy, k.setUp(t, healthyFirstUID, fmt.Sprintf("v%d", i), volume.EmptyDirSource{}))
	}
	for _, uid := range []string{hostileFirstUID, hostileLastUID} {
		for i := range 3 {
			name := fmt.Sprintf("h%d", i)
			k.setUp(t, uid, name, volume.EmptyDirSource{})
			makeEntries(t, filepath.Join(k.root, "pods", uid, "plugins", "kubernetes.io~empty-dir", name), ".nodevol.json.tmp-00000000000", 20)
		}
	}
	rep, err := scanRootWithin(k.root, limits)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range healthy {
		found := false
		for _, v := range rep.volumes {
			if v.Path != p {
				continue
			}
			found = true
			if v.Verdict == verdictError || strings.Contains(v.Reason, "budget") {
				t.Errorf("%s: %s (%s): %s; want its verdict", p, v.Verdict, v.ReasonCode, v.Reason)
			}
		}
		if !found {
			t.Errorf("%s: not in the report", p)
		}
	}
	pod, err := k.layout.PodDir(healthyFirstUID)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range rep.overBudget {
		if o == pod {
			t.Errorf("the healthy pod %s is over budget; problems: %v", pod, rep.problems)
		}
	}
	wantOverBudget(t, k, rep, hostileFirstUID, hostileLastUID)
	if _, err := os.Stat(healthy[0]); err != nil {
		t.Fatal(err)
	}
}
