//go:build linux

package cli

import (
	"context"
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/moby/sys/mountinfo"

	"github.com/nodevol/nodevol/emptydir"
	"github.com/nodevol/nodevol/volume"
)

const (
	testUID  = "8a3f0c52-1d4e-4b7a-9c21-6e5d2f1a7b90"
	testUID2 = "c0ffee00-1d4e-4b7a-9c21-6e5d2f1a7b90"
)

var (
	teardownKeys = []string{"path", "podUID", "volume", "medium", "action", "dryRun", "done", "refused", "mounts", "reason", "subpaths", "mountNamespace"}
	scanKeys     = []string{"podUID", "plugin", "volume", "path", "medium", "mountPoint", "nestedMounts", "subpaths", "verdict", "reasonCode", "safeToRemove", "reason", "mountNamespace"}
)

// kubelet is a temporary kubelet root with the emptyDir plugin on it.
type kubelet struct {
	root   string
	layout volume.Layout
	plugin *emptydir.Plugin
}

// newKubelet makes a kubelet root under dir. Mounts left beneath it by a
// failing test (the plugin's tmpfs volumes) are detached before the
// temporary directory is removed.
func newKubelet(t *testing.T, dir string) *kubelet {
	t.Helper()
	root := filepath.Join(dir, "kubelet")
	l, err := volume.NewLayout(root)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		mounts, _ := mountPointsUnder(dir)
		for _, m := range mounts {
			syscall.Unmount(m, syscall.MNT_DETACH)
		}
	})
	return &kubelet{root: root, layout: l, plugin: emptydir.New(volume.NewHost(l, nil, 1<<30))}
}

// setUp sets up an emptyDir volume of pod uid and returns its directory.
func (k *kubelet) setUp(t *testing.T, uid, name string, src volume.EmptyDirSource) string {
	t.Helper()
	pod := &volume.Pod{UID: uid, Volumes: []volume.Spec{{Name: name, EmptyDir: &src}}, HugePages: map[int64]int64{2 << 20: 8 << 20}}
	m, err := k.plugin.NewMounter(&pod.Volumes[0], pod)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.SetUp(context.Background(), volume.MounterArgs{}); err != nil {
		t.Fatalf("SetUp(%s): %v", name, err)
	}
	return m.Path()
}

// dir is a volume directory of any plugin (nothing is created).
func (k *kubelet) dir(t *testing.T, uid, plugin, name string) string {
	t.Helper()
	d, err := k.layout.VolumeDir(uid, plugin, name)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// ready is the volume's ready marker.
func (k *kubelet) ready(t *testing.T, uid, name string) string {
	t.Helper()
	d, err := k.layout.PluginVolumeDir(uid, emptydir.PluginName, name)
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(d, "ready")
}

// scanLines splits "scan --json" output into volumes, problems and
// leftovers, and checks that each line has exactly its kind's keys.
func scanLines(t *testing.T, out string) (vols, problems, leftovers []map[string]any) {
	t.Helper()
	for line := range strings.Lines(out) {
		var obj map[string]any
		if err := json.Unmarshal([]byte(line), &obj); err != nil {
			t.Fatalf("line %q is not a JSON object: %v", line, err)
		}
		var want []string
		switch {
		case obj["problem"] != nil:
			want = []string{"problem", "error"}
			problems = append(problems, obj)
		case obj["leftover"] != nil:
			want = []string{"leftover"}
			leftovers = append(leftovers, obj)
		default:
			want = scanKeys
			vols = append(vols, obj)
			for _, key := range []string{"nestedMounts", "subpaths"} {
				if _, ok := obj[key].([]any); !ok {
					t.Errorf("%s is not a list in %s", key, line)
				}
			}
		}
		var got []string
		for k := range obj {
			got = append(got, k)
		}
		slices.Sort(got)
		if want = slices.Sorted(slices.Values(want)); !slices.Equal(got, want) {
			t.Errorf("JSON keys %v, want %v in %s", got, want, line)
		}
	}
	return vols, problems, leftovers
}

// byVolume indexes scan --json volume objects by volume name.
func byVolume(vols []map[string]any) map[string]map[string]any {
	m := map[string]map[string]any{}
	for _, v := range vols {
		m[v["volume"].(string)] = v
	}
	return m
}

// mountPointsUnder lists the mount points beneath dir, deepest first, so
// they can be unmounted in that order (as nodevol-demo's cleanup does).
func mountPointsUnder(dir string) ([]string, error) {
	infos, err := mountinfo.GetMounts(mountinfo.PrefixFilter(dir))
	if err != nil {
		return nil, err
	}
	var points []string
	for _, m := range infos {
		if m.Mountpoint != dir {
			points = append(points, m.Mountpoint)
		}
	}
	slices.SortFunc(points, func(a, b string) int { return strings.Count(b, "/") - strings.Count(a, "/") })
	return points, nil
}
