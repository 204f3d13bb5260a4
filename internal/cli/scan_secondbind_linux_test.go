package cli

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
)

// TestScanFindsMountsMadeThroughASecondBindOfTheRoot: a mount made
// inside a volume directory through another bind mount of the kubelet
// root (or of a pod directory) is listed by the table under that other
// path only; scan, which looks each volume up through the pods
// directory's mountdetect.Parent, must still find it (by its position in
// the filesystem) and never call the volume ok: for an emptyDir (planned
// through the listing) and another plugin's volume, whole and
// incrementally. Siblings whose names sort between the volume's and the
// volume's followed by "/" hold mounts of their own, which are theirs
// only.
func TestScanFindsMountsMadeThroughASecondBindOfTheRoot(t *testing.T) {
	mounttest.RequireMounts(t)
	base := mounttest.RealTempDir(t)
	mounttest.Tmpfs(t, base, "")
	root := filepath.Join(base, "kubelet")
	vols := filepath.Join(root, "pods", testUID, "volumes")
	names := []string{"cache", "cache-2", "cache.x", "cache0", "cachea"}
	var specs []string
	for _, name := range names {
		specs = append(specs, "dir kubernetes.io~empty-dir/"+name+"/inner", "dir kubernetes.io~configmap/"+name+"/inner")
	}
	mounttest.Build(t, vols, specs...)
	view := filepath.Join(base, "view")
	podView := filepath.Join(base, "podview")
	for _, d := range []string{view, podView} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	mounttest.Bind(t, root, view)
	mounttest.Bind(t, filepath.Join(root, "pods", testUID), podView)
	through := map[string]string{
		"kubernetes.io~empty-dir/cache": filepath.Join(view, "pods", testUID, "volumes"),
		"kubernetes.io~configmap/cache": podView + "/volumes",
	}
	for vol, from := range through {
		mounttest.Tmpfs(t, filepath.Join(from, vol, "inner"), "")
	}
	for _, name := range names[1:] {
		for _, plugin := range []string{"kubernetes.io~empty-dir", "kubernetes.io~configmap"} {
			mounttest.Tmpfs(t, filepath.Join(view, "pods", testUID, "volumes", plugin, name, "inner"), "")
		}
	}
	check := func(how string, rep *scanReport) {
		t.Helper()
		seen := 0
		for _, v := range rep.volumes {
			seen++
			if v.Verdict == verdictOK || len(v.NestedMounts) != 1 {
				t.Errorf("%s: %s is %s with %d mounts beneath (%v): %s", how, v.Path, v.Verdict, len(v.NestedMounts), v.NestedMounts, v.Reason)
			}
		}
		if seen != 2*len(names) {
			t.Errorf("%s: %d volumes in the report, want %d", how, seen, 2*len(names))
		}
	}
	rep, err := scanRoot(root)
	if err != nil {
		t.Fatal(err)
	}
	check("scan", rep)
	c := newTestIncrementalScan()
	check("incremental scan", incScan(t, c, root))
	check("incremental scan again", incScan(t, c, root))
}
