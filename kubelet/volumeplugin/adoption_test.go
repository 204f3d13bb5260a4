package volumeplugin

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8svolume "k8s.io/kubernetes/pkg/volume"
	"k8s.io/kubernetes/pkg/volume/secret"
	volumetest "k8s.io/kubernetes/pkg/volume/testing"

	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
)

// TestAdoptStockSecretVolume: a node switched in place from a stock
// kubelet. The stock kubelet's tmpfs of a running pod's secret volume
// (source "tmpfs", its ready marker, no nodevol.json) is adopted by the
// secret plugin's next SetUp through the adapter with WithAdoption: the
// secret is written into that very tmpfs, the adoption is counted on the
// registry given, and the volume tears down as nodevol's own.
func TestAdoptStockSecretVolume(t *testing.T) {
	mounttest.RequireMounts(t)
	root := t.TempDir()
	dir := filepath.Join(root, "pods", testUID, "volumes", "kubernetes.io~secret", "creds")
	meta := filepath.Join(root, "pods", testUID, "plugins", "kubernetes.io~empty-dir", "wrapped_creds")
	for _, d := range []string{dir, meta} {
		if err := os.MkdirAll(d, 0o750); err != nil {
			t.Fatal(err)
		}
	}
	mounttest.Tmpfs(t, dir, "size=1m")
	if err := os.WriteFile(filepath.Join(meta, "ready"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	before := mounttest.UniqueMountID(t, dir)

	// nodevol-kubelet starts: its plugins are initialised.
	reg := prometheus.NewRegistry()
	s := &v1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "db"}, Data: map[string][]byte{"username": []byte("admin")}}
	host := volumetest.NewFakeVolumeHost(t, root, fake.NewClientset(s), append(secret.ProbeVolumePlugins(), ProbeVolumePlugins(WithAdoption(reg))...))
	sp, err := host.GetPluginMgr().FindPluginByName("kubernetes.io/secret")
	if err != nil {
		t.Fatal(err)
	}
	mode := int32(0o644) // the API server's default
	vol := v1.Volume{Name: "creds", VolumeSource: v1.VolumeSource{Secret: &v1.SecretVolumeSource{SecretName: "db", DefaultMode: &mode}}}
	pod := testPod()
	pod.Spec.Volumes = []v1.Volume{vol}
	m, err := sp.NewMounter(k8svolume.NewSpecFromVolume(&vol), pod)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.SetUp(k8svolume.MounterArgs{}); err != nil {
		t.Fatalf("secret SetUp on the stock kubelet's tmpfs = %v", err)
	}
	if got, err := os.ReadFile(filepath.Join(dir, "username")); err != nil || string(got) != "admin" {
		t.Errorf("secret file = %q, %v", got, err)
	}
	if after := mounttest.UniqueMountID(t, dir); after != before {
		t.Errorf("the volume's mount is %#x, not the stock kubelet's %#x", after, before)
	}
	if got := adoptedCount(t, reg); got != 1 {
		t.Errorf("adopted volumes counted: %v, want 1", got)
	}
	u, err := sp.NewUnmounter("creds", types.UID(testUID))
	if err != nil {
		t.Fatal(err)
	}
	if err := u.TearDown(); err != nil {
		t.Fatalf("TearDown of the adopted secret volume = %v", err)
	}
	if _, err := os.Lstat(dir); !os.IsNotExist(err) {
		t.Errorf("%s still exists (%v)", dir, err)
	}
}

// adoptedCount is the adopted-volumes counter of reg, summed over media.
func adoptedCount(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() == "nodevol_emptydir_adopted_volumes_total" {
			for _, m := range mf.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}
