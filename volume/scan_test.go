package volume

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/nodevol/nodevol/internal/fsat"
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
