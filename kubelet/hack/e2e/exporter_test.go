package main

import (
	"strings"
	"testing"
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
