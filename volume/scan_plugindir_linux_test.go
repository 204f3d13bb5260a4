package volume

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
)

// TestWithPluginDirHandsEveryVolumeOnce: the plugin directories come in
// the order of ScanResult.Volumes, each volume in exactly one of them,
// with a descriptor of the directory it was listed in and one of the pod
// directory it was reached from; a plugin directory with no volume is not
// handed on.
func TestWithPluginDirHandsEveryVolumeOnce(t *testing.T) {
	root := t.TempDir()
	l, _ := NewLayout(root)
	for _, p := range []string{
		"pods/u1/volumes/kubernetes.io~empty-dir/cache",
		"pods/u1/volumes/kubernetes.io~empty-dir/mem",
		"pods/u1/volumes/kubernetes.io~csi/pvc-1",
		"pods/u1/volumes/kubernetes.io~secret", // no volumes
		"pods/u2/volumes/kubernetes.io~configmap/cfg",
	} {
		if err := os.MkdirAll(filepath.Join(root, p), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	var handed []VolumeDir
	var rels []string
	res, err := l.ScanVolumes(WithPluginDir(func(pd PluginDir) {
		rels = append(rels, pd.Rel)
		if want := filepath.Join(root, "pods", pd.Rel); pd.Path != want {
			t.Errorf("Path %q, want %q", pd.Path, want)
		}
		var listed, inPod unix.Stat_t
		if err := unix.Fstat(pd.Fd, &listed); err != nil {
			t.Fatal(err)
		}
		if err := unix.Fstatat(pd.Pod, "volumes/"+filepath.Base(pd.Rel), &inPod, unix.AT_SYMLINK_NOFOLLOW); err != nil || inPod.Ino != listed.Ino || inPod.Dev != listed.Dev {
			t.Errorf("the pod directory handed with %s does not hold it: %v", pd.Rel, err)
		}
		for _, v := range pd.Volumes {
			if filepath.Dir(v.Path) != pd.Path {
				t.Errorf("volume %s handed with the plugin directory %s", v.Path, pd.Path)
			}
			var st unix.Stat_t
			if err := unix.Fstatat(pd.Fd, v.Volume, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
				t.Errorf("the volume %s is not in the descriptor handed on: %v", v.Volume, err)
			}
		}
		handed = append(handed, pd.Volumes...)
	}))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(handed, res.Volumes) {
		t.Errorf("handed on %v, listed %v", handed, res.Volumes)
	}
	want := []string{"u1/volumes/kubernetes.io~csi", "u1/volumes/kubernetes.io~empty-dir", "u2/volumes/kubernetes.io~configmap"}
	if !slices.Equal(rels, want) {
		t.Errorf("plugin directories %q, want %q", rels, want)
	}
}

// TestWithPluginDirIsTheDirectoryListed: a plugin directory exchanged
// with another one (RENAME_EXCHANGE, by anyone who can write in the pod
// directory) while ScanVolumes lists the pod, thousands of times. Each
// descriptor handed on is the directory whose entries were listed — the
// names listed are all there, and nothing of the other directory is
// mixed in — whichever of the two the name reached when it was opened.
// After the callback, the volumes are examined through that descriptor,
// never by the plugin directory's name again.
func TestWithPluginDirIsTheDirectoryListed(t *testing.T) {
	root := t.TempDir()
	l, _ := NewLayout(root)
	vols := filepath.Join(root, "pods", "u1", "volumes")
	real := filepath.Join(vols, "kubernetes.io~secret")
	decoy := filepath.Join(root, "pods", "u1", "decoy") // not listed where it is
	for _, d := range []string{filepath.Join(real, "tls"), filepath.Join(real, "ca"), filepath.Join(decoy, "sentinel")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	sentinel := []byte("the decoy's, never a volume's\n")
	if err := os.WriteFile(filepath.Join(decoy, "sentinel", "data"), sentinel, 0o600); err != nil {
		t.Fatal(err)
	}
	swaps := mounttest.ExchangeFlicker(real, decoy)
	seen := map[string]int{}
	const iterations = 5000
	for range iterations {
		_, err := l.ScanVolumes(WithPluginDir(func(pd PluginDir) {
			names := make([]string, 0, len(pd.Volumes))
			for _, v := range pd.Volumes {
				names = append(names, v.Volume)
				var st unix.Stat_t
				if err := unix.Fstatat(pd.Fd, v.Volume, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
					t.Errorf("listed %s, not in the descriptor handed on: %v", v.Volume, err)
				}
			}
			key := filepath.Join(names...)
			seen[key]++
			if key != "ca/tls" && key != "sentinel" {
				t.Errorf("one directory's listing mixed with the other's: %q", key)
			}
		}))
		if err != nil {
			t.Fatal(err)
		}
		if t.Failed() {
			break
		}
	}
	swaps.Stop(t)
	found := 0
	for _, d := range []string{real, decoy} {
		got, err := os.ReadFile(filepath.Join(d, "sentinel", "data"))
		if err != nil {
			continue
		}
		found++
		if string(got) != string(sentinel) {
			t.Errorf("sentinel changed: %q", got)
		}
	}
	if found != 1 {
		t.Errorf("the sentinel is in %d of the two directories", found)
	}
	t.Logf("%d scans, %d exchanges, plugin directories listed: %v", iterations, swaps.Count(), seen)
	if swaps.Count() == 0 {
		t.Fatal("the plugin directory was never exchanged: the race was not run")
	}
}

// TestWithPluginDirRelIsThePathFromThePodsDirectory: Rel is exactly
// "<uid>/volumes/<escaped plugin>" and Path the root's pods directory
// joined with it, under a kubelet root reached through symlinks (as
// /var/lib/kubelet may be), for plugin directories of every pod; Rel
// names, from the pods directory, the very directory handed on. The
// volumes handed on keep the values they had in the callback once the
// scan's list has grown past them (many volumes, many plugins), and an
// append to them cannot write into the scan's list.
func TestWithPluginDirRelIsThePathFromThePodsDirectory(t *testing.T) {
	top := t.TempDir()
	real := filepath.Join(top, "data", "kubelet")
	root := filepath.Join(top, "kubelet")
	if err := os.MkdirAll(real, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("data-link/kubelet", root); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("data", filepath.Join(top, "data-link")); err != nil {
		t.Fatal(err)
	}
	l, err := NewLayout(root)
	if err != nil {
		t.Fatal(err)
	}
	plugins := []string{"kubernetes.io~empty-dir", "kubernetes.io~csi", "example.com~my-driver"}
	for p := range 3 {
		uid := fmt.Sprintf("pod-%d", p)
		for i, plugin := range plugins {
			for v := range 1 + 37*i {
				if err := os.MkdirAll(filepath.Join(real, "pods", uid, "volumes", plugin, fmt.Sprintf("v%03d", v)), 0o755); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	pods, err := unix.Open(filepath.Join(real, "pods"), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(pods)
	type handedOn struct {
		vols, values []VolumeDir
	}
	var handed []handedOn
	res, err := l.ScanVolumes(WithPluginDir(func(pd PluginDir) {
		uid, plugin := pd.Volumes[0].PodUID, pd.Volumes[0].Plugin
		escaped, err := EscapePluginName(plugin)
		if err != nil {
			t.Fatal(err)
		}
		if want := uid + "/volumes/" + escaped; pd.Rel != want {
			t.Errorf("Rel %q, want %q", pd.Rel, want)
		}
		if want := root + "/pods/" + pd.Rel; pd.Path != want {
			t.Errorf("Path %q, want %q", pd.Path, want)
		}
		var byRel, listed unix.Stat_t
		if err := unix.Fstatat(pods, pd.Rel, &byRel, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			t.Errorf("Rel %q from the pods directory: %v", pd.Rel, err)
		} else if err := unix.Fstat(pd.Fd, &listed); err != nil || byRel.Ino != listed.Ino || byRel.Dev != listed.Dev {
			t.Errorf("Rel %q names another directory than the one handed on (%v)", pd.Rel, err)
		}
		if cap(pd.Volumes) != len(pd.Volumes) {
			t.Errorf("%s: the volumes handed on have room for %d more: an append would write into the scan's list", pd.Rel, cap(pd.Volumes)-len(pd.Volumes))
		}
		handed = append(handed, handedOn{pd.Volumes, slices.Clone(pd.Volumes)})
	}))
	if err != nil {
		t.Fatal(err)
	}
	if len(handed) != 9 || len(res.Volumes) != 3*(1+38+75) {
		t.Fatalf("%d plugin directories handed on, %d volumes; want 9 and %d", len(handed), len(res.Volumes), 3*(1+38+75))
	}
	var all []VolumeDir
	for _, h := range handed {
		if !slices.Equal(h.vols, h.values) {
			t.Errorf("volumes handed on changed after the callback: %v, then %v", h.values, h.vols)
		}
		all = append(all, h.vols...)
	}
	if !slices.Equal(all, res.Volumes) {
		t.Errorf("the volumes handed on are not the scan's")
	}
}

// TestWithPluginDirOnlyHandsTheSameVolumes: WithPluginDirOnly hands on
// every volume WithPluginDir does, in the same plugin directories and
// order, and leaves ScanResult.Volumes empty; everything else in the
// result (problems, leftovers, pods, budgets) is the same.
func TestWithPluginDirOnlyHandsTheSameVolumes(t *testing.T) {
	root := t.TempDir()
	l, _ := NewLayout(root)
	for _, p := range []string{
		"pods/u1/volumes/kubernetes.io~empty-dir/cache",
		"pods/u1/volumes/kubernetes.io~empty-dir/mem",
		"pods/u1/volumes/kubernetes.io~csi/pvc-1",
		"pods/u1/volumes/kubernetes.io~secret", // no volumes
		"pods/u2/volumes/kubernetes.io~configmap/cfg",
		"pods/u2/volumes/kubernetes.io~configmap/..bad", // a problem
		"pods/u3/volumes", // a leftover
	} {
		if err := os.MkdirAll(filepath.Join(root, p), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	type handed struct {
		path, rel string
		vols      []VolumeDir
	}
	scan := func(opt func(func(PluginDir)) ScanOption) (ScanResult, []handed) {
		var got []handed
		res, err := l.ScanVolumes(ScanLimits{Node: 1000, Pod: 100}, opt(func(pd PluginDir) {
			got = append(got, handed{pd.Path, pd.Rel, slices.Clone(pd.Volumes)})
		}))
		if err != nil {
			t.Fatal(err)
		}
		return res, got
	}
	all, want := scan(WithPluginDir)
	only, got := scan(WithPluginDirOnly)
	if len(only.Volumes) != 0 {
		t.Errorf("WithPluginDirOnly left %d volumes in the result", len(only.Volumes))
	}
	if len(want) != 3 || !reflect.DeepEqual(got, want) {
		t.Errorf("WithPluginDirOnly handed on %+v; WithPluginDir %+v", got, want)
	}
	all.Volumes = nil
	if !reflect.DeepEqual(only, all) {
		t.Errorf("results differ but for Volumes:\n only %+v\n all  %+v", only, all)
	}
}
