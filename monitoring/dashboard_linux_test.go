package monitoring

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/textparse"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
	"golang.org/x/sys/unix"

	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
)

// dashboardFile is the Grafana dashboard, in the chart (its ConfigMap
// holds it byte for byte: kubelet/deploytest).
const dashboardFile = "../deploy/helm/nodevol/dashboards/nodevol.json"

// kubeletSeries are the kubelet's series the dashboard may name besides
// nodevol's: the one its alert watches.
var kubeletSeries = []string{"storage_operation_duration_seconds_count"}

// dashboard is the part of Grafana's dashboard JSON model the test reads.
type dashboard struct {
	Title      string `json:"title"`
	UID        string `json:"uid"`
	Templating struct {
		List []struct {
			Name  string          `json:"name"`
			Type  string          `json:"type"`
			Query json.RawMessage `json:"query"`
		} `json:"list"`
	} `json:"templating"`
	Panels []struct {
		ID      int    `json:"id"`
		Title   string `json:"title"`
		Type    string `json:"type"`
		Targets []struct {
			RefID string `json:"refId"`
			Expr  string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
}

// grafanaVariables are what Grafana substitutes in a query before
// Prometheus sees it, with values it could take.
var grafanaVariables = strings.NewReplacer("$__rate_interval", "2m", "${node}", ".*", "$node", ".*")

// query is one PromQL query of the dashboard, where it is.
type query struct{ where, expr string }

func readDashboard(t *testing.T) []query {
	t.Helper()
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		t.Fatalf("%s: more than one JSON value", dashboardFile)
	}
	if d.Title == "" || d.UID == "" || len(d.Panels) == 0 {
		t.Fatalf("%s: title %q, uid %q, %d panels", dashboardFile, d.Title, d.UID, len(d.Panels))
	}
	var qs []query
	ids := map[int]bool{}
	for _, p := range d.Panels {
		if ids[p.ID] {
			t.Errorf("panel id %d twice", p.ID)
		}
		ids[p.ID] = true
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			qs = append(qs, query{where: "panel " + p.Title + " " + tg.RefID, expr: tg.Expr})
		}
	}
	labelValues := regexp.MustCompile(`^label_values\(([a-zA-Z_:][a-zA-Z0-9_:]*), *[a-zA-Z_][a-zA-Z0-9_]*\)$`)
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q struct {
			Query string `json:"query"`
		}
		if err := json.Unmarshal(v.Query, &q); err != nil {
			t.Fatalf("variable %s: %v", v.Name, err)
		}
		m := labelValues.FindStringSubmatch(q.Query)
		if m == nil {
			t.Errorf("variable %s: query %q; want label_values(metric, label)", v.Name, q.Query)
			continue
		}
		qs = append(qs, query{where: "variable " + v.Name, expr: m[1]})
	}
	return qs
}

// metricNames are the metric names a query selects.
func metricNames(t *testing.T, q query) []string {
	t.Helper()
	expr, err := parser.NewParser(parser.Options{}).ParseExpr(grafanaVariables.Replace(q.expr))
	if err != nil {
		t.Errorf("%s: %q: %v", q.where, q.expr, err)
		return nil
	}
	var names []string
	parser.Inspect(expr, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok {
			name := vs.Name
			for _, m := range vs.LabelMatchers {
				if m.Name == model.MetricNameLabel && m.Type == labels.MatchEqual {
					name = m.Value
				}
			}
			if name == "" {
				t.Errorf("%s: %q selects series by no metric name", q.where, q.expr)
			}
			names = append(names, name)
		}
		return nil
	})
	return names
}

// exportedNames are the series names an exposition holds (a histogram's
// _bucket, _sum and _count), read with Prometheus's scrape parser.
func exportedNames(t *testing.T, body []byte) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	p := textparse.NewPromParser(body, labels.NewSymbolTable(), false)
	for {
		e, err := p.Next()
		if errors.Is(err, io.EOF) {
			return names
		}
		if err != nil {
			t.Fatal(err)
		}
		if e == textparse.EntrySeries {
			var l labels.Labels
			p.Labels(&l)
			names[l.Get(model.MetricNameLabel)] = true
		}
	}
}

// TestDashboard: the dashboard is valid JSON of Grafana's model, every
// query parses as PromQL and names only series that a real agent and
// driver export (read from their /metrics, on a node where every series
// has a value: a NAS in an emptyDir, a CSI volume published and its
// teardown refused) or the kubelet's series the alert watches; and every
// query, run by Prometheus's engine on those metrics scraped over a few
// minutes, returns something.
func TestDashboard(t *testing.T) {
	qs := readDashboard(t)
	mounttest.RequireMounts(t)
	n := newNode(t, "dashboard", unix.MS_SLAVE)
	agent, driver := n.agent(t, "1s"), n.driver(t)
	for _, dir := range []string{filepath.Join(n.emptyDir, "nas"), filepath.Join(driver.target, "nas")} {
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		mounttest.Tmpfs(t, dir, "size=1m")
	}
	if err := refusal(driver.unpublish()); !errors.Is(err, errRefused) {
		t.Fatalf("unpublish of a volume holding a NAS: %v; want a refusal", err)
	}
	// Every series name the agent and the driver export, in any of the
	// scrapes.
	exported := map[string]bool{}
	recorded := func(tg target) target {
		metrics := tg.metrics
		tg.metrics = func() ([]byte, error) {
			b, err := metrics()
			if err == nil {
				for name := range exportedNames(t, b) {
					exported[name] = true
				}
			}
			return b, err
		}
		return tg
	}
	// The kubelet: what nodevol's wrote on /metrics in the e2e, its
	// teardown of an emptyDir holding a NAS refused in the last scrapes.
	kubelet := readKubeletFixture(t, "nodevol").target(n.name, span{"healthy", 6}, span{"refused-1", 1}, span{"refused-2", 1})
	tl := newTimeline(t)
	tl.run(t, 8, func(int) {
		_ = driver.unpublish()
	}, recorded(processTarget("nodevol", n.name, agent)), recorded(processTarget("nodevol-csi", n.name, driver.process)), kubelet)
	for _, q := range qs {
		for _, name := range metricNames(t, q) {
			if !exported[name] && !slices.Contains(kubeletSeries, name) {
				t.Errorf("%s: %q names %s, which neither nodevol serve nor nodevol-csi exports, nor the kubelet series %v", q.where, q.expr, name, kubeletSeries)
			}
		}
	}
	engine := promql.NewEngine(promql.EngineOpts{MaxSamples: 1e6, Timeout: time.Minute, LookbackDelta: 5 * time.Minute})
	at := tl.t0.Add(time.Duration(tl.steps-1) * scrapeInterval)
	for _, q := range qs {
		qry, err := engine.NewInstantQuery(context.Background(), tl.st, nil, grafanaVariables.Replace(q.expr), at)
		if err != nil {
			t.Errorf("%s: %v", q.where, err)
			continue
		}
		res := qry.Exec(context.Background())
		if res.Err != nil {
			t.Errorf("%s: %q: %v", q.where, q.expr, res.Err)
		} else if v, ok := res.Value.(promql.Vector); !ok || len(v) == 0 {
			t.Errorf("%s: %q returns nothing on a node where every series has a value: %v", q.where, q.expr, res.Value)
		}
		qry.Close()
	}
}
