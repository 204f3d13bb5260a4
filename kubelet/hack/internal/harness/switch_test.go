package harness

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Log lines as kubelet v1.37.2 wrote them in the switch to nodevol
// (nodevol-kubelet at 6fdd848, root shortened to /r): the stock kubelet's
// configMap volume set up again (a structured message: quotes escaped),
// its Memory emptyDir refused at SetUp and at TearDown for want of a
// record, another volume's TearDown succeeding, and another pod's line.
const (
	switchUID       = "7936d3c3-2108-4a45-b767-face1725aa73"
	setUpOK         = `I1127 10:52:57.247174     234 operation_generator.go:620] "MountVolume.SetUp succeeded for volume \"config\" (UniqueName: \"kubernetes.io/configmap/` + switchUID + `-config\") pod \"s10-app\" (UID: \"` + switchUID + `\") " pod="default/s10-app"`
	setUpRefused    = `E1127 10:52:57.248166     234 nestedpendingoperations.go:348] Operation for "{volumeName:kubernetes.io/empty-dir/` + switchUID + `-mem podName:` + switchUID + ` nodeName:}" failed. No retries permitted until 2026-11-27 10:52:57.748156216 +0000 UTC m=+1.783518691 (durationBeforeRetry 500ms). Error: MountVolume.SetUp failed for volume "mem" (UniqueName: "kubernetes.io/empty-dir/` + switchUID + `-mem") pod "s10-app" (UID: "` + switchUID + `") : SetUp /r/pods/` + switchUID + `/volumes/kubernetes.io~empty-dir/mem (uncertain): /r/pods/` + switchUID + `/volumes/kubernetes.io~empty-dir/mem is already a mount point (mount ID 74 (unique 0x800ddc36)) that SetUp did not record; not mounting tmpfs over it`
	tearDownRefused = `E1127 10:53:26.569999     234 nestedpendingoperations.go:348] Operation for "{volumeName:kubernetes.io/empty-dir/` + switchUID + `-mem podName:` + switchUID + ` nodeName:}" failed. No retries permitted until 2026-11-27 10:53:27.069992794 +0000 UTC m=+31.105355269 (durationBeforeRetry 500ms). Error: UnmountVolume.TearDown failed for volume "kubernetes.io/empty-dir/` + switchUID + `-mem" (UniqueName: "kubernetes.io/empty-dir/` + switchUID + `-mem") pod "` + switchUID + `" (UID: "` + switchUID + `") : TearDown /r/pods/` + switchUID + `/volumes/kubernetes.io~empty-dir/mem (transient): emptyDir teardown of /r/pods/` + switchUID + `/volumes/kubernetes.io~empty-dir/mem refused: a filesystem of type tmpfs from tmpfs is mounted on the volume directory itself, but nodevol has no record of mounting it (a volume set up by another kubelet, or a foreign mount); if it is the volume's own tmpfs or hugetlbfs, unmount it yourself, then tear down again: refusing to remove /r/pods/` + switchUID + `/volumes/kubernetes.io~empty-dir/mem: crosses a mount boundary (nothing was deleted): /r/pods/` + switchUID + `/volumes/kubernetes.io~empty-dir/mem [tmpfs from tmpfs]`
	tearDownOK      = `I1127 10:53:26.576330     234 operation_generator.go:791] UnmountVolume.TearDown succeeded for volume "kubernetes.io/empty-dir/` + switchUID + `-scratch" pod "` + switchUID + `" (UID: "` + switchUID + `"). InnerVolumeSpecName "scratch". PluginName "kubernetes.io/empty-dir", VolumeGIDValue ""`
	otherPodSetUp   = `I1127 10:52:57.247771     234 operation_generator.go:620] "MountVolume.SetUp succeeded for volume \"scratch\" (UniqueName: \"kubernetes.io/empty-dir/81514b70-dd7a-4c23-8bed-8cd51506593c-scratch\") pod \"s10-nas\" (UID: \"81514b70-dd7a-4c23-8bed-8cd51506593c\") " pod="default/s10-nas"`
)

func TestVolumeOps(t *testing.T) {
	v := newVolumeOps(switchUID)
	// The kubelet logs "Error syncing pod" and events without the retry
	// delay: a failure counts once, on the nestedpendingoperations line.
	noRetry := strings.Replace(setUpRefused, "(durationBeforeRetry 500ms)", "", 1)
	for _, l := range []string{setUpOK, setUpRefused, setUpRefused, noRetry, tearDownRefused, tearDownOK, otherPodSetUp} {
		v.add(l)
	}
	if got := v.setUp["configmap/config"]; got.succeeded != 1 || got.failed != 0 {
		t.Errorf("configmap/config SetUps = %+v; want 1 succeeded", got)
	}
	mem := v.setUp["empty-dir/mem"]
	if mem.succeeded != 0 || mem.failed != 2 || !strings.HasPrefix(mem.firstError, "SetUp /r/pods/"+switchUID+"/volumes/kubernetes.io~empty-dir/mem (uncertain): ") {
		t.Errorf("empty-dir/mem SetUps = %+v; want 2 failed, the error after the kubelet's prefix", mem)
	}
	if !isNoRecordRefusal(mem.firstError) {
		t.Errorf("the SetUp refusal %q is not recognised as nodevol's want of a record", mem.firstError)
	}
	if got := v.tearDown["empty-dir/mem"]; got.failed != 1 || !strings.HasPrefix(got.firstError, "TearDown /r/pods/") || !isNoRecordRefusal(got.firstError) {
		t.Errorf("empty-dir/mem TearDowns = %+v; want 1 failed, nodevol's want of a record", got)
	}
	if got := v.tearDown["empty-dir/scratch"]; got.succeeded != 1 || got.failed != 0 {
		t.Errorf("empty-dir/scratch TearDowns = %+v; want 1 succeeded", got)
	}
	if len(v.setUp) != 2 || len(v.tearDown) != 2 {
		t.Errorf("volumes counted: SetUp %v, TearDown %v; another pod's line counted?", v.setUp, v.tearDown)
	}
	if !v.allSetUp([]podVolume{{key: "configmap/config"}}) || v.allSetUp([]podVolume{{key: "configmap/config"}, {key: "empty-dir/mem"}}) {
		t.Error("allSetUp does not require a successful SetUp of every volume")
	}
}

func TestIsNoRecordRefusal(t *testing.T) {
	// nodevol's refusal of a NAS inside a volume it set up is not a want
	// of a record: the switch must not unmount it by hand.
	nas := "emptyDir teardown of /r/pods/u/volumes/kubernetes.io~empty-dir/scratch refused: 1 mount beneath the volume; unmount it first (their data is not the volume's): refusing to remove /r/pods/u/volumes/kubernetes.io~empty-dir/scratch: crosses a mount boundary (nothing was deleted): /r/pods/u/volumes/kubernetes.io~empty-dir/scratch/nas [tmpfs from e2e-nas]"
	if isNoRecordRefusal(nas) {
		t.Errorf("the NAS refusal counts as a want of a record: %s", nas)
	}
	if isNoRecordRefusal("unlinkat /r/pods/u/volumes/kubernetes.io~empty-dir/scratch/nas: device or resource busy") {
		t.Error("the stock kubelet's EBUSY counts as a want of a record")
	}
}

func TestVolumesOf(t *testing.T) {
	k := &kubelet{root: "/r"}
	pod := switchAppPod("app", "cm", "sec")
	pod.UID = types.UID(switchUID)
	// The ServiceAccount admission's volume.
	pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: "kube-api-access-abcde", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{}}})
	got := map[string]podVolume{}
	var keys []string
	for _, v := range volumesOf(k, pod) {
		got[v.key] = v
		keys = append(keys, v.key)
	}
	want := []string{"empty-dir/mem", "empty-dir/scratch", "secret/secret", "configmap/config", "downward-api/podinfo", "projected/proj", "projected/kube-api-access-abcde"}
	if !slices.Equal(keys, want) {
		t.Fatalf("volumes %v; want %v", keys, want)
	}
	for key, tmpfs := range map[string]bool{"empty-dir/mem": true, "empty-dir/scratch": false, "secret/secret": true, "configmap/config": false, "downward-api/podinfo": true, "projected/proj": true} {
		if got[key].tmpfs != tmpfs {
			t.Errorf("%s: tmpfs %v; want %v", key, got[key].tmpfs, tmpfs)
		}
	}
	pods := "/r/pods/" + switchUID
	if v := got["secret/secret"]; v.dir != pods+"/volumes/kubernetes.io~secret/secret" || v.meta != pods+"/plugins/kubernetes.io~empty-dir/wrapped_secret" {
		t.Errorf("secret/secret at %s, its emptyDir metadata at %s", v.dir, v.meta)
	}
	if v := got["empty-dir/mem"]; !v.memory || v.meta != pods+"/plugins/kubernetes.io~empty-dir/mem" {
		t.Errorf("empty-dir/mem: memory %v, metadata at %s", v.memory, v.meta)
	}
}

func TestRootLeftovers(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{"plugins_registry", "pods"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// The kubelet's own state, and nodevol's session log (kept by design).
	for _, f := range []string{"cpu_manager_state", "nodevol-sessions.json"} {
		if err := os.WriteFile(filepath.Join(root, f), []byte("{}"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	left, err := rootLeftovers(root)
	if err != nil || len(left) != 0 {
		t.Fatalf("a kubelet root with nothing of a pod's: %v, %v", left, err)
	}
	meta := filepath.Join(root, "pods", "u", "plugins", "kubernetes.io~empty-dir", "wrapped_secret")
	if err := os.MkdirAll(meta, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"ready", "nodevol.json", ".nodevol.json.tmp-0123456789abcdef", "nodevol-sessions.json"} {
		if err := os.WriteFile(filepath.Join(meta, f), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	left, err = rootLeftovers(root)
	if err != nil {
		t.Fatal(err)
	}
	rel := "$ROOT/pods/u/plugins/kubernetes.io~empty-dir/wrapped_secret/"
	for _, want := range []string{"pod directory $ROOT/pods/u", "ready marker " + rel + "ready", "nodevol file " + rel + "nodevol.json", "nodevol file " + rel + ".nodevol.json.tmp-0123456789abcdef", "nodevol file " + rel + "nodevol-sessions.json"} {
		if !slices.Contains(left, want) {
			t.Errorf("leftovers %q lack %q", left, want)
		}
	}
}

func TestTimingColumns(t *testing.T) {
	rows := []row{{Kubelet: "nodevol"}, {Kubelet: "stock→nodevol"}, {Kubelet: "stock"}, {Kubelet: "nodevol→stock"}}
	if got := timingColumns(rows); !slices.Equal(got, []string{"stock", "nodevol", "stock→nodevol", "nodevol→stock"}) {
		t.Errorf("timingColumns = %v", got)
	}
	if got := timingColumns(rows[:1]); !slices.Equal(got, []string{"stock", "nodevol"}) {
		t.Errorf("timingColumns without a switch = %v; want the two kubelets", got)
	}
}
