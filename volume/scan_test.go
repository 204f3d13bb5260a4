package volume

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
