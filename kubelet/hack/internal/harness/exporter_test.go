package harness

import (
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestMetrics(t *testing.T) {
	const text = `# TYPE nodevol_scan_danger_volumes gauge
nodevol_scan_danger_volumes{root="/r"} 1
# TYPE nodevol_scan_volumes gauge
nodevol_scan_volumes{plugin="kubernetes.io/empty-dir",reason="nested-mount",root="/r",verdict="danger"} 1
nodevol_scan_volumes{plugin="kubernetes.io/empty-dir",reason="not-mounted",root="/r",verdict="ok"} 2
# TYPE nodevol_mount_namespace gauge
nodevol_mount_namespace{state="foreign"} 1
nodevol_mount_namespace{state="host"} 0
`
	m, err := parseMetrics(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"nodevol_scan_danger_volumes", map[string]string{"root": "/r"}, 1},
		{"nodevol_scan_danger_volumes", map[string]string{"root": "/other"}, 0},
		{"nodevol_scan_volumes", map[string]string{"plugin": "kubernetes.io/empty-dir"}, 3},
		{"nodevol_scan_volumes", map[string]string{"verdict": "danger", "reason": "nested-mount"}, 1},
		{"nodevol_mount_namespace", map[string]string{"state": "foreign"}, 1},
		{"nodevol_absent", nil, 0},
	} {
		if got := m.value(c.name, c.labels); got != c.want {
			t.Errorf("value(%s, %v) = %g; want %g", c.name, c.labels, got, c.want)
		}
	}
	if got, want := m.series("nodevol_scan_danger_volumes"), `nodevol_scan_danger_volumes{root="/r"} 1`; got != want {
		t.Errorf("series = %s; want %s", got, want)
	}
	if _, err := parseMetrics(strings.NewReader("not metrics {")); err == nil {
		t.Errorf("parseMetrics of garbage = nil error")
	}
}

func TestPrepareExporter(t *testing.T) {
	ctx := t.Context()
	log := newLogger(io.Discard, time.Now(), "")
	// Not selected: nothing is read or built.
	in, err := prepareExporter(ctx, options{run: "^1-", deploy: "/nonexistent"}, t.TempDir(), log)
	if in != nil || err != nil {
		t.Errorf("prepareExporter(-run ^1-) = %v, %v; want nil, nil", in, err)
	}
	// Selected: the DaemonSet is read before any image is built.
	_, err = prepareExporter(ctx, options{run: "^7-", deploy: "/nonexistent"}, t.TempDir(), log)
	if err == nil || !strings.Contains(err.Error(), "manifests directory") {
		t.Errorf("prepareExporter(-run ^7-, no manifests) = %v; want an error about the manifests directory", err)
	}
	// An image given by flag is read and its digest file checked.
	dir := t.TempDir()
	_, err = prepareExporter(ctx, options{run: "^7-", deploy: testDeploy, nodevolImage: filepath.Join(dir, "missing.tar")}, dir, log)
	if err == nil {
		t.Errorf("prepareExporter with a missing -nodevol-image = nil error")
	}
}

func TestScenariosFor(t *testing.T) {
	all, err := selectScenarios("^(7|8)-")
	if err != nil {
		t.Fatal(err)
	}
	ids := func(ss []scenario) string {
		var out []string
		for _, s := range ss {
			out = append(out, s.id())
		}
		return strings.Join(out, ",")
	}
	if got := ids(scenariosFor(all, stockKubelet)); got != "7-exporter" {
		t.Errorf("stock runs %s; want 7-exporter (the control runs once, on the nodevol kubelet)", got)
	}
	if got := ids(scenariosFor(all, nodevolKubelet)); got != "7-exporter,8-exporter-no-propagation" {
		t.Errorf("nodevol runs %s; want both", got)
	}
	// The switches run on nodes of their own, never in a kubelet's turn.
	switches, err := selectScenarios("switch")
	if err != nil {
		t.Fatal(err)
	}
	if got := ids(switches); got != "10-switch-to-nodevol,11-switch-to-stock" {
		t.Errorf("-run switch selects %s", got)
	}
	for _, f := range flavors {
		if got := ids(scenariosFor(switches, f)); got != "" {
			t.Errorf("the %s kubelet's turn runs %s", f, got)
		}
	}
}
