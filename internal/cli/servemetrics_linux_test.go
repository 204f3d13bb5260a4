package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nodevol/nodevol/mountdetect"
)

// TestServeMetricsPluginLabelBounded: the plugin label of
// nodevol_scan_volumes and nodevol_scan_nested_mounts has a fixed set of
// values. Whoever can write into a pod directory makes
// pods/<uid>/volumes/<anything>/<vol>; a label taken from the directory's
// name would add one series per directory, every scan, and an agent on
// every node whose /metrics grows without bound is a denial of service on
// the monitoring system (Prometheus's memory, the scrape size and time).
// Known plugins keep their names; any other plugin is folded into "other"
// (its name is in the agent's log for every unhealthy volume).
func TestServeMetricsPluginLabelBounded(t *testing.T) {
	root := t.TempDir()
	const n = 300
	for i := range n {
		dir := filepath.Join(root, "pods", testUID, "volumes", fmt.Sprintf("attacker.example~p%d", i), "v")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []string{"kubernetes.io~secret", "kubernetes.io~csi"} {
		if err := os.MkdirAll(filepath.Join(root, "pods", testUID, "volumes", p, "v"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	rep, err := scanRoot(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.volumes) != n+2 {
		t.Fatalf("scanRoot found %d volumes; want %d", len(rep.volumes), n+2)
	}
	for i := range rep.volumes { // as if each had a mount inside
		rep.volumes[i].NestedMounts = []mountdetect.Mount{{MountPoint: rep.volumes[i].Path + "/nas", FSType: "tmpfs"}}
	}
	reg := prometheus.NewRegistry()
	m, err := newServeMetrics(reg, "/var/lib/kubelet", &versionInfo{Version: "v1"})
	if err != nil {
		t.Fatal(err)
	}
	m.observe(rep, nil, time.Second, time.Now())
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		name := f.GetName()
		if name != "nodevol_scan_volumes" && name != "nodevol_scan_nested_mounts" {
			continue
		}
		plugins := map[string]float64{}
		for _, s := range f.GetMetric() {
			for _, l := range s.GetLabel() {
				if l.GetName() == "plugin" {
					plugins[l.GetValue()] += s.GetGauge().GetValue()
				}
			}
		}
		// The known plugins and "other", whatever the attacker made.
		if len(plugins) > 32 {
			t.Errorf("%s has %d plugin label values after %d attacker-made plugin directories; want a fixed bound (known plugins and \"other\")",
				name, len(plugins), n)
		}
		want := map[string]float64{"other": n, "kubernetes.io/secret": 1, "kubernetes.io/csi": 1}
		for p, v := range want {
			if plugins[p] != v {
				t.Errorf("%s{plugin=%q} = %v; want %v", name, p, plugins[p], v)
			}
		}
	}
}
