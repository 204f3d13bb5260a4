package deploytest

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nodevol/nodevol/kubelet/helmchart"
)

// chartPath is the Helm chart deploy/ is generated from.
var chartPath = filepath.Join(deployDir, chartDir, "nodevol")

// nonDefaultValues change everything the chart lets an operator change,
// within what the deployment policy allows (a toleration of every taint
// stays, for instance: without it the policy fails, on purpose).
func nonDefaultValues() map[string]any {
	const digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	return map[string]any{
		"kubeletRoot": "/data/kubelet",
		"agent": map[string]any{
			"namespace": "node-agents",
			"image":     map[string]any{"repository": "registry.example.com/mirror/nodevol", "digest": digest, "pullPolicy": "Always"},
			"interval":  "30s",
			"resources": map[string]any{
				"requests": map[string]any{"cpu": "20m", "memory": "64Mi"},
				"limits":   map[string]any{"memory": "256Mi"},
			},
			"tolerations":       []any{map[string]any{"operator": "Exists"}, map[string]any{"key": "dedicated", "operator": "Equal", "value": "storage", "effect": "NoSchedule"}},
			"nodeSelector":      map[string]any{"kubernetes.io/os": "linux", "node-role.example.com/storage": "true"},
			"priorityClassName": "node-agents",
		},
		"csi": map[string]any{
			"namespace":         "csi-drivers",
			"driverName":        "scratch.example.com",
			"image":             map[string]any{"repository": "registry.example.com/mirror/nodevol-csi", "tag": "v1.2.3"},
			"quotas":            false,
			"memoryBytes":       int64(8 << 30),
			"priorityClassName": "",
		},
		"metrics":        map[string]any{"agentPort": 19477, "securePort": 19478, "csiPort": 19479},
		"metricsReader":  map[string]any{"subjects": []any{map[string]any{"kind": "ServiceAccount", "name": "prometheus", "namespace": "observability"}}},
		"serviceMonitor": map[string]any{"enabled": true, "labels": map[string]any{"release": "kube-prometheus"}, "interval": "1m", "scrapeTimeout": "20s", "bearerTokenFile": "/var/run/secrets/prometheus/token"},
		"prometheusRule": map[string]any{"enabled": true, "labels": map[string]any{"release": "kube-prometheus"}},
		"dashboard":      map[string]any{"enabled": true},
	}
}

// renderDocs renders the chart with vals: the agent's documents (with its
// ServiceMonitor and PrometheusRule, as deploy/ holds them) and the
// driver's (as deploy/csi/ holds them), and the rendered text by template.
func renderDocs(t *testing.T, vals map[string]any) (agent, driver []doc, out map[string]string) {
	t.Helper()
	out, err := helmchart.Render(chartPath, vals)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for k := range out {
			if !yield(k) {
				return
			}
		}
	}) {
		docs, err := splitDocs(name, []byte(out[name]))
		if err != nil {
			t.Fatal(err)
		}
		switch name {
		case "csi.yaml":
			driver = append(driver, docs...)
		case "dashboard.yaml":
			// A ConfigMap for Grafana: TestChartDashboard.
		case "auth-delegator.yaml", "metrics-reader.yaml":
			// The RBAC of secure metrics, as deploy/secure-metrics/
			// holds it: TestChartSecureMetricsRBAC; applied to a real
			// API server by the harness's
			// TestSecureMetricsAgainstAPIServer.
		default:
			agent = append(agent, docs...)
		}
	}
	return agent, driver, out
}

// TestChartLint: helm lint --strict passes with the default values and
// with others.
func TestChartLint(t *testing.T) {
	for name, vals := range map[string]map[string]any{"default": nil, "non-default": nonDefaultValues()} {
		t.Run(name, func(t *testing.T) {
			msgs, err := helmchart.Lint(chartPath, vals)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range msgs {
				t.Log(m)
			}
		})
	}
}

// TestDeployIsChartDefault: the manifests of deploy/ are the chart's
// default render, byte for byte, and deploy/ holds no other manifest.
func TestDeployIsChartDefault(t *testing.T) {
	want, err := helmchart.Deploy(chartPath)
	if err != nil {
		t.Fatal(err)
	}
	for file, b := range want {
		have, err := os.ReadFile(filepath.Join(deployDir, filepath.FromSlash(file)))
		if err != nil {
			t.Errorf("%v: run `cd kubelet && go generate ./helmchart/`", err)
			continue
		}
		if !bytes.Equal(have, b) {
			t.Errorf("deploy/%s is not the chart's default render: run `cd kubelet && go generate ./helmchart/` (edit the chart, not the file)", file)
		}
	}
	err = filepath.WalkDir(deployDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(deployDir, p)
		if err != nil {
			return err
		}
		if d.IsDir() {
			if rel == chartDir {
				return filepath.SkipDir
			}
			return nil
		}
		if _, ok := want[filepath.ToSlash(rel)]; !ok {
			t.Errorf("deploy/%s is not generated from the chart: make it a template of the chart", rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestChartDefault: the default render passes the checks deploy/ passes
// (TestDeployIsChartDefault says they are the same text; this says so
// without deploy/).
func TestChartDefault(t *testing.T) {
	agent, driver, out := renderDocs(t, map[string]any{"serviceMonitor": map[string]any{"enabled": true}, "prometheusRule": map[string]any{"enabled": true}})
	for _, err := range check(agent) {
		t.Error(err)
	}
	for _, err := range checkCSI(driver) {
		t.Error(err)
	}
	for _, err := range checkPodMonitor(agent, driver) {
		t.Error(err)
	}
	if _, ok := out["dashboard.yaml"]; ok {
		t.Error("the dashboard's ConfigMap is rendered by default")
	}
}

// TestChartNonDefault: with every value changed, the render passes the
// API server's strict validation, PodSecurity's checks and the
// deployment policy (flags consistent with the mounts, probes, ports, the
// ServiceMonitor reaching the Service), and says what the values say.
func TestChartNonDefault(t *testing.T) {
	agent, driver, out := renderDocs(t, nonDefaultValues())
	for _, err := range check(agent) {
		t.Error(err)
	}
	for _, err := range checkCSI(driver) {
		t.Error(err)
	}
	for _, err := range checkPodMonitor(agent, driver) {
		t.Error(err)
	}
	all := strings.Join([]string{out["nodevol.yaml"], out["csi.yaml"], out["servicemonitor.yaml"], out["prometheusrule.yaml"], out["auth-delegator.yaml"], out["metrics-reader.yaml"]}, "\n")
	for _, want := range []string{
		"image: registry.example.com/mirror/nodevol@sha256:0123456789abcdef",
		"image: registry.example.com/mirror/nodevol-csi:v1.2.3",
		"imagePullPolicy: Always",
		"- --root=/host/data/kubelet",
		"- --host-root=/data/kubelet",
		"- --interval=30s",
		"- --listen=:19477",
		"- --secure-metrics-listen=:19478",
		"prometheus.io/port: \"19478\"",
		"bearerTokenFile: /var/run/secrets/prometheus/token",
		"- --http-address=:19479",
		"- --driver-name=scratch.example.com",
		"- --kubelet-endpoint=/data/kubelet/plugins/scratch.example.com/csi.sock",
		"path: /data/kubelet/plugins_registry",
		"- --quotas=false",
		"- --memory-bytes=8589934592",
		"priorityClassName: node-agents",
		"node-role.example.com/storage: \"true\"",
		"namespace: node-agents",
		"namespace: csi-drivers",
		"release: kube-prometheus",
		"name: prometheus\n    namespace: observability",
		"name: nodevol\n    namespace: node-agents",
		"name: nodevol-csi\n    namespace: csi-drivers",
		"interval: 1m",
		"memory: 256Mi",
	} {
		if !strings.Contains(all, want) {
			t.Errorf("the render has no %q", want)
		}
	}
	if strings.Count(out["csi.yaml"], "priorityClassName") != 0 {
		t.Error("csi.priorityClassName \"\" still renders a priorityClassName")
	}
}

// TestChartComponents: each component is switched off on its own, and its
// objects (and alerts) go with it.
func TestChartComponents(t *testing.T) {
	monitoring := map[string]any{"serviceMonitor": map[string]any{"enabled": true}, "prometheusRule": map[string]any{"enabled": true}}
	off := func(component string) map[string]any {
		v := map[string]any{component: map[string]any{"enabled": false}}
		for k, x := range monitoring {
			v[k] = x
		}
		return v
	}
	_, _, out := renderDocs(t, off("agent"))
	if _, ok := out["nodevol.yaml"]; ok || strings.Contains(out["prometheusrule.yaml"], "name: nodevol-agent") || out["servicemonitor.yaml"] != "" {
		t.Errorf("agent.enabled=false still renders the agent: %s", strings.Join(slices.Collect(func(yield func(string) bool) {
			for k := range out {
				yield(k)
			}
		}), ", "))
	}
	if !strings.Contains(out["csi.yaml"], "kind: CSIDriver") || !strings.Contains(out["prometheusrule.yaml"], "NodevolCSIUnpublishRefused") {
		t.Error("agent.enabled=false drops the driver or its alert")
	}
	_, _, out = renderDocs(t, off("csi"))
	if _, ok := out["csi.yaml"]; ok || strings.Contains(out["prometheusrule.yaml"], "name: nodevol-csi") {
		t.Error("csi.enabled=false still renders the driver or its alert")
	}
	if !strings.Contains(out["nodevol.yaml"], "kind: DaemonSet") || !strings.Contains(out["prometheusrule.yaml"], "NodevolVolumeInDanger") {
		t.Error("csi.enabled=false drops the agent or its alerts")
	}
	_, _, out = renderDocs(t, map[string]any{"namespaces": map[string]any{"create": false}})
	if strings.Contains(out["nodevol.yaml"]+out["csi.yaml"], "kind: Namespace") {
		t.Error("namespaces.create=false still renders Namespaces")
	}
}

// TestChartSecureMetrics: the agent serves /metrics securely by default
// and plainly with metrics.secure.enabled false, the driver securely with
// csi.metrics.secure.enabled; each render passes the checks deploy/
// passes (token mounted exactly when secure, the secure port named and
// scraped), and the RBAC comes and goes with them.
func TestChartSecureMetrics(t *testing.T) {
	monitoring := func(v map[string]any) map[string]any {
		v["serviceMonitor"] = map[string]any{"enabled": true}
		v["prometheusRule"] = map[string]any{"enabled": true}
		return v
	}
	agent, driver, out := renderDocs(t, monitoring(map[string]any{}))
	for _, want := range []string{"- --secure-metrics-listen=:9478", "prometheus.io/scheme: https", "port: secure-metrics"} {
		if !strings.Contains(out["nodevol.yaml"]+out["servicemonitor.yaml"], want) {
			t.Errorf("the default render has no %q", want)
		}
	}
	if out["auth-delegator.yaml"] == "" || out["metrics-reader.yaml"] == "" {
		t.Error("the default render has no RBAC for secure metrics")
	}
	if !strings.Contains(out["csi.yaml"], "- --secure-metrics-address=\n") {
		t.Error("the driver's --secure-metrics-address is not written out empty by default")
	}
	for _, err := range append(check(agent), checkCSI(driver)...) {
		t.Error(err)
	}

	agent, _, out = renderDocs(t, monitoring(map[string]any{"metrics": map[string]any{"secure": map[string]any{"enabled": false}}}))
	if strings.Contains(out["nodevol.yaml"], "secure-metrics") || strings.Contains(out["servicemonitor.yaml"], "https") {
		t.Error("metrics.secure.enabled=false still serves or scrapes secure metrics")
	}
	if _, ok := out["auth-delegator.yaml"]; ok {
		t.Error("the RBAC of secure metrics is rendered with neither component serving them")
	}
	for _, err := range check(agent) {
		t.Errorf("metrics.secure.enabled=false: %v", err)
	}

	csiSecure := map[string]any{"csi": map[string]any{"metrics": map[string]any{"secure": map[string]any{"enabled": true}, "securePort": 19480}}}
	_, driver, out = renderDocs(t, csiSecure)
	if !strings.Contains(out["csi.yaml"], "- --secure-metrics-address=:19480") || !strings.Contains(out["auth-delegator.yaml"], "name: nodevol-csi") {
		t.Error("csi.metrics.secure.enabled: no --secure-metrics-address=:19480 or no review rights for the driver")
	}
	for _, err := range checkCSI(driver) {
		t.Errorf("csi.metrics.secure.enabled: %v", err)
	}
	if _, err := helmchart.Render(chartPath, monitoring(csiSecure)); err == nil || !strings.Contains(err.Error(), "csi.metrics.secure.enabled") {
		t.Errorf("csi.metrics.secure.enabled with a PodMonitor: %v; want an error naming csi.metrics.secure.enabled", err)
	}

	_, _, out = renderDocs(t, map[string]any{"rbac": map[string]any{"create": false}})
	if _, ok := out["metrics-reader.yaml"]; ok {
		t.Error("rbac.create=false still renders the RBAC")
	}
}

// TestChartSecureMetricsRBAC: the default render's RBAC lets the agent's
// and the driver's ServiceAccounts review tokens and access, nothing
// else, and lets metricsReader.subjects (Prometheus) get /metrics.
func TestChartSecureMetricsRBAC(t *testing.T) {
	_, _, out := renderDocs(t, nil)
	for _, want := range []string{
		"resources: [\"tokenreviews\"]\n    verbs: [\"create\"]",
		"resources: [\"subjectaccessreviews\"]\n    verbs: [\"create\"]",
		"name: nodevol\n    namespace: nodevol-system",
		"name: nodevol-csi\n    namespace: nodevol-csi",
	} {
		if !strings.Contains(out["auth-delegator.yaml"], want) {
			t.Errorf("auth-delegator.yaml has no %q", want)
		}
	}
	if n := strings.Count(out["auth-delegator.yaml"], "verbs:"); n != 2 {
		t.Errorf("auth-delegator.yaml grants %d rules; want the two reviews only", n)
	}
	for _, want := range []string{
		"nonResourceURLs: [\"/metrics\"]\n    verbs: [\"get\"]",
		"subjects:\n  - kind: ServiceAccount\n    name: prometheus-k8s\n    namespace: monitoring",
	} {
		if !strings.Contains(out["metrics-reader.yaml"], want) {
			t.Errorf("metrics-reader.yaml has no %q:\n%s", want, out["metrics-reader.yaml"])
		}
	}
}

// TestChartValuesCaught: values that break the deployment are caught by
// the same checks as a mistake in deploy/.
func TestChartValuesCaught(t *testing.T) {
	for _, tt := range []struct {
		name string
		vals map[string]any
		want string
	}{
		{"no toleration", map[string]any{"agent": map[string]any{"tolerations": []any{}}}, "no toleration"},
		{"a CPU limit", map[string]any{"agent": map[string]any{"resources": map[string]any{"limits": map[string]any{"cpu": "100m", "memory": "128Mi"}}}}, "no CPU limit"},
		{"image latest", map[string]any{"agent": map[string]any{"image": map[string]any{"tag": "latest"}}}, "not latest or none"},
		{"an interval serve refuses (under 1s)", map[string]any{"agent": map[string]any{"interval": "500ms"}}, "--interval"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			vals := tt.vals
			vals["serviceMonitor"] = map[string]any{"enabled": true}
			vals["prometheusRule"] = map[string]any{"enabled": true}
			agent, _, _ := renderDocs(t, vals)
			errs := check(agent)
			if !slices.ContainsFunc(errs, func(err error) bool { return strings.Contains(err.Error(), tt.want) }) {
				t.Errorf("check() = %v; want an error containing %q", errors.Join(errs...), tt.want)
			}
		})
	}
}

// TestChartDashboard: with dashboard.enabled, the chart renders a
// ConfigMap the API server accepts, labelled for Grafana's sidecar,
// holding the dashboard file byte for byte (monitoring/ checks the
// dashboard's queries).
func TestChartDashboard(t *testing.T) {
	_, _, out := renderDocs(t, map[string]any{"dashboard": map[string]any{"enabled": true}})
	docs, err := splitDocs("dashboard.yaml", []byte(out["dashboard.yaml"]))
	if err != nil {
		t.Fatal(err)
	}
	objs, errs := newAPIServer().load(docs)
	for _, err := range errs {
		t.Error(err)
	}
	if len(objs.configMaps) != 1 || len(docs) != 1 {
		t.Fatalf("%d documents, %d ConfigMaps; want one", len(docs), len(objs.configMaps))
	}
	want, err := os.ReadFile(filepath.Join(chartPath, "dashboards", "nodevol.json"))
	if err != nil {
		t.Fatal(err)
	}
	for cm := range objs.configMaps {
		if cm.Namespace != "nodevol-system" || cm.Labels["grafana_dashboard"] != "1" {
			t.Errorf("ConfigMap %s/%s labels %v; want it in nodevol-system with grafana_dashboard: \"1\"", cm.Namespace, cm.Name, cm.Labels)
		}
		if got := cm.Data["nodevol.json"]; got != strings.TrimSpace(string(want)) {
			t.Errorf("the ConfigMap's nodevol.json is not dashboards/nodevol.json (%d bytes; want %d)", len(got), len(strings.TrimSpace(string(want))))
		}
	}
}

// checkPodMonitor: the PodMonitor among the agent's documents (where
// deploy/prometheus-operator puts it) scrapes the driver's pods.
func checkPodMonitor(agent, driver []doc) []error {
	a, errs := newAPIServer().load(agent)
	d, errs2 := newAPIServer().load(driver)
	if errs := append(errs, errs2...); len(errs) > 0 {
		return errs
	}
	if len(a.podMonitors) != 1 {
		return []error{fmt.Errorf("%d PodMonitors; want nodevol-csi's", len(a.podMonitors))}
	}
	return podMonitorErrors(a.podMonitors, d)
}

// TestPodMonitorScrapesDriver: deploy/prometheus-operator's PodMonitor
// scrapes deploy/csi's driver; a PodMonitor on another port is caught.
func TestPodMonitorScrapesDriver(t *testing.T) {
	agent, err := readManifests(deployDir, csiDir, secureMetricsDir, chartDir)
	if err != nil {
		t.Fatal(err)
	}
	driver, err := readManifests(filepath.Join(deployDir, csiDir))
	if err != nil {
		t.Fatal(err)
	}
	for _, err := range checkPodMonitor(agent, driver) {
		t.Error(err)
	}
	runMutations(t, "deploy/", agent, func(docs []doc) []error { return checkPodMonitor(docs, driver) }, []mutation{
		{"PodMonitor on a port the driver does not name", "    - port: http\n", "    - port: metrics\n", "want a port of DaemonSet nodevol-csi's container"},
		{"PodMonitor in the agent's namespace", "  namespace: nodevol-csi\n", "  namespace: nodevol-system\n", "selects no pods of the driver's DaemonSet"},
	})
}

// TestChartValuesSchema: values.schema.json refuses, before anything is
// rendered, a value of the wrong kind or shape, and a misspelt key (which
// Helm would otherwise ignore, leaving the default in place).
func TestChartValuesSchema(t *testing.T) {
	for _, tt := range []struct {
		name string
		vals map[string]any
		want string
	}{
		{"a misspelt key", map[string]any{"agent": map[string]any{"imagee": map[string]any{"tag": "v1"}}}, "imagee"},
		{"a digest that is not one", map[string]any{"csi": map[string]any{"image": map[string]any{"digest": "v1.2.3"}}}, "digest"},
		{"a port past 65535", map[string]any{"metrics": map[string]any{"agentPort": 70000}}, "agentPort"},
		{"a secure port past 65535", map[string]any{"csi": map[string]any{"metrics": map[string]any{"securePort": 70000}}}, "securePort"},
		{"secure metrics misspelt", map[string]any{"metrics": map[string]any{"secure": map[string]any{"enable": true}}}, "enable"},
		{"a metrics reader of no kind RBAC knows", map[string]any{"metricsReader": map[string]any{"subjects": []any{map[string]any{"kind": "Robot", "name": "r2"}}}}, "kind"},
		{"a relative kubelet root", map[string]any{"kubeletRoot": "var/lib/kubelet"}, "kubeletRoot"},
		{"an interval serve would refuse", map[string]any{"agent": map[string]any{"interval": "10"}}, "interval"},
		{"a namespace that is not a name", map[string]any{"csi": map[string]any{"namespace": "CSI_Drivers"}}, "namespace"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := helmchart.Render(chartPath, tt.vals)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Render = %v; want an error naming %s", err, tt.want)
			}
			if _, err := helmchart.Lint(chartPath, tt.vals); err == nil {
				t.Error("Lint passed")
			}
		})
	}
}
