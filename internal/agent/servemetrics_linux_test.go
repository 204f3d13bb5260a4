package agent

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nodevol/nodevol/httpserver/kubeauth"
	"github.com/nodevol/nodevol/internal/base/promtext"
	"github.com/nodevol/nodevol/internal/cli"
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
	rep, err := cli.ScanRoot(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Volumes()) != n+2 {
		t.Fatalf("scanRoot found %d volumes; want %d", len(rep.Volumes()), n+2)
	}
	for i := range rep.Volumes() { // as if each had a mount inside
		rep.Volumes()[i].NestedMounts = []mountdetect.Mount{{MountPoint: rep.Volumes()[i].Path + "/nas", FSType: "tmpfs"}}
	}
	reg := promtext.NewRegistry()
	m, err := newServeMetrics(reg, "/var/lib/kubelet", &cli.VersionInfo{Version: "v1"})
	if err != nil {
		t.Fatal(err)
	}
	m.observe(rep, nil, time.Second, time.Now())
	var body strings.Builder
	if _, err := reg.WriteTo(&body); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"nodevol_scan_volumes", "nodevol_scan_nested_mounts"} {
		plugins := map[string]float64{}
		for _, line := range strings.Split(body.String(), "\n") {
			if !strings.HasPrefix(line, name+"{") {
				continue
			}
			m := pluginAndValue.FindStringSubmatch(line)
			if m == nil {
				t.Fatalf("%s: no plugin label and value in %q", name, line)
			}
			v, err := strconv.ParseFloat(m[2], 64)
			if err != nil {
				t.Fatal(err)
			}
			plugins[m[1]] += v
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

// pluginAndValue is the plugin label's value and the sample's value of a
// line of the text exposition format.
var pluginAndValue = regexp.MustCompile(`[{,]plugin="([^"]*)".* (\S+)$`)

// TestAuthRequestsCounter: the secure endpoint's counter is exported
// with every result from the start, at 0, under the name and help
// kubeauth gives it, and counts what the filter reports.
func TestAuthRequestsCounter(t *testing.T) {
	reg := promtext.NewRegistry()
	count, err := newAuthRequestsCounter(reg)
	if err != nil {
		t.Fatal(err)
	}
	count(kubeauth.Forbidden)
	count(kubeauth.Allowed)
	count(kubeauth.Allowed)
	var body strings.Builder
	if _, err := reg.WriteTo(&body); err != nil {
		t.Fatal(err)
	}
	want := "# HELP nodevol_metrics_auth_requests_total " + kubeauth.RequestsHelp + "\n" +
		"# TYPE nodevol_metrics_auth_requests_total counter\n" +
		`nodevol_metrics_auth_requests_total{result="allowed"} 2` + "\n" +
		`nodevol_metrics_auth_requests_total{result="forbidden"} 1` + "\n" +
		`nodevol_metrics_auth_requests_total{result="unauthenticated"} 0` + "\n" +
		`nodevol_metrics_auth_requests_total{result="unavailable"} 0` + "\n"
	if body.String() != want {
		t.Errorf("/metrics:\n%s\nwant:\n%s", body.String(), want)
	}
}

// TestServeMetricsScrapeSeesOneScan: a scrape while serve records a scan
// sees the whole scan or none of it. nodevol_scan_danger_volumes is the
// sum of the danger series of nodevol_scan_volumes, and an alert or an
// operator reading both must never find the gauge at 1 beside a volume
// still "ok" (the e2e once scraped exactly that, when the NAS was
// mounted). Scans alternate between a volume in danger and the same
// volume ok while scrapes check every exposition.
func TestServeMetricsScrapeSeesOneScan(t *testing.T) {
	reg := promtext.NewRegistry()
	m, err := newServeMetrics(reg, "/var/lib/kubelet", &cli.VersionInfo{Version: "v1"})
	if err != nil {
		t.Fatal(err)
	}
	vol := cli.ScanVolume{PodUID: testUID, Plugin: "kubernetes.io~empty-dir", Volume: "scratch", Verdict: cli.VerdictOK, ReasonCode: cli.ReasonNotMounted}
	okVol := vol
	ok := cli.NewScanReport("", []*cli.ScanVolume{&okVol}, nil)
	vol.Verdict, vol.ReasonCode = cli.VerdictDanger, cli.ReasonNestedMount
	vol.NestedMounts = []mountdetect.Mount{{MountPoint: "/nas", FSType: "tmpfs"}}
	danger := cli.NewScanReport("", []*cli.ScanVolume{&vol}, nil)
	stop := make(chan struct{})
	scans := make(chan int)
	go func() {
		i := 0
		for ; ; i++ {
			select {
			case <-stop:
				scans <- i
				return
			default:
			}
			m.observe([]*cli.ScanReport{ok, danger}[i%2], nil, time.Millisecond, time.Now())
		}
	}()
	dangerLine := regexp.MustCompile(`(?m)^nodevol_scan_danger_volumes\{[^}]*\} (\S+)$`)
	seriesLine := regexp.MustCompile(`(?m)^nodevol_scan_volumes\{[^}]*verdict="danger"[^}]*\} (\S+)$`)
	const scrapes = 5000
	torn := 0
	for range scrapes {
		var body strings.Builder
		if _, err := reg.WriteTo(&body); err != nil {
			t.Fatal(err)
		}
		gauge, series := "0", "0"
		if g := dangerLine.FindStringSubmatch(body.String()); g != nil {
			gauge = g[1]
		}
		if s := seriesLine.FindStringSubmatch(body.String()); s != nil {
			series = s[1]
		}
		if gauge != series {
			torn++
		}
	}
	close(stop)
	n := <-scans
	if torn > 0 {
		t.Errorf("%d of %d scrapes during %d scans saw nodevol_scan_danger_volumes differ from the danger series it sums", torn, scrapes, n)
	}
	t.Logf("%d scrapes during %d scans", scrapes, n)
}
