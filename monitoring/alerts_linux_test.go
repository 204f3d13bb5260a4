package monitoring

import (
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/model/textparse"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/rules"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/util/teststorage"
	"go.yaml.in/yaml/v3"
	"golang.org/x/sys/unix"

	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
)

// ruleFile is the PrometheusRule the chart renders with its default
// values (kubelet/deploytest checks that this file is that render).
const ruleFile = "../deploy/prometheus-operator/prometheusrule.yaml"

// scrapeInterval is the ServiceMonitor's, and the rules' evaluation
// interval here.
const scrapeInterval = 30 * time.Second

// scrapes is how many scrapes a scenario records: 12 minutes of
// Prometheus's time, past every alert's range and for.
const scrapes = 24

// loadRules parses the rule groups of the PrometheusRule with Prometheus's
// own rule file parser and validation, and makes each alert a rule of
// Prometheus's rule engine.
func loadRules(t *testing.T) []*rules.AlertingRule {
	t.Helper()
	b, err := os.ReadFile(ruleFile)
	if err != nil {
		t.Fatal(err)
	}
	var pr struct {
		Spec map[string]any `yaml:"spec"`
	}
	if err := yaml.Unmarshal(b, &pr); err != nil {
		t.Fatal(err)
	}
	groups, err := yaml.Marshal(pr.Spec)
	if err != nil {
		t.Fatal(err)
	}
	p := parser.NewParser(parser.Options{})
	rg, errs := rulefmt.Parse(groups, false, model.LegacyValidation, p, slog.New(slog.DiscardHandler))
	if len(errs) > 0 {
		t.Fatalf("%s: %v", ruleFile, errors.Join(errs...))
	}
	var out []*rules.AlertingRule
	for _, g := range rg.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			expr, err := p.ParseExpr(r.Expr)
			if err != nil {
				t.Fatalf("%s: %s: %v", ruleFile, r.Alert, err)
			}
			out = append(out, rules.NewAlertingRule(r.Alert, expr, time.Duration(r.For), time.Duration(r.KeepFiringFor),
				labels.FromMap(r.Labels), labels.FromMap(r.Annotations), labels.EmptyLabels(), "", false, slog.New(slog.DiscardHandler)))
		}
	}
	return out
}

// target is something Prometheus scrapes: its job, and the node label the
// ServiceMonitor's relabeling adds.
type target struct {
	job, node string
	// metrics answers a scrape: the exposition, or an error (up 0).
	metrics func() ([]byte, error)
}

func processTarget(job, node string, p *process) target {
	return target{job: job, node: node, metrics: func() ([]byte, error) {
		code, body, err := p.get("/metrics")
		if err == nil && code != http.StatusOK {
			err = fmt.Errorf("/metrics: %d", code)
		}
		return body, err
	}}
}

// timeline records scrapes into a TSDB as Prometheus's scrape loop does
// (every series with job, instance and node, and up), the i-th scrape
// at t0 + i × scrapeInterval: the real programs' metrics, taken about a
// second apart in the test's time, on Prometheus's clock.
type timeline struct {
	st    *teststorage.TestStorage
	t0    time.Time
	steps int
	// pace is the test's time between scrapes: a second, for programs
	// scanning every second; 0 for an exposition the test writes.
	pace time.Duration
}

func newTimeline(t *testing.T) *timeline {
	return &timeline{st: teststorage.New(t), t0: time.Now().Truncate(time.Second), pace: time.Second}
}

func (tl *timeline) now() time.Time { return tl.t0.Add(time.Duration(tl.steps) * scrapeInterval) }

// scrape scrapes every target once, at the timeline's next step.
func (tl *timeline) scrape(t *testing.T, targets ...target) {
	t.Helper()
	ts := tl.now().UnixMilli()
	app := tl.st.Appender(context.Background())
	for _, tg := range targets {
		instance := labels.FromStrings("job", tg.job, "instance", tg.job+"@"+tg.node, "node", tg.node)
		body, err := tg.metrics()
		up := 1.0
		if err != nil {
			t.Logf("scrape %s on %s: %v", tg.job, tg.node, err)
			up = 0
		} else if err := appendExposition(app, body, ts, instance); err != nil {
			t.Fatalf("%s on %s: %v", tg.job, tg.node, err)
		}
		b := labels.NewBuilder(instance)
		b.Set(model.MetricNameLabel, "up")
		if _, err := app.Append(0, b.Labels(), ts, up); err != nil {
			t.Fatal(err)
		}
	}
	if err := app.Commit(); err != nil {
		t.Fatal(err)
	}
	tl.steps++
}

// appendExposition parses the text format with Prometheus's own scrape
// parser and appends every sample with the target's labels.
func appendExposition(app storage.Appender, body []byte, ts int64, target labels.Labels) error {
	p := textparse.NewPromParser(body, labels.NewSymbolTable(), false)
	for {
		e, err := p.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if e != textparse.EntrySeries {
			continue
		}
		_, _, v := p.Series()
		var l labels.Labels
		p.Labels(&l)
		b := labels.NewBuilder(l)
		target.Range(func(x labels.Label) { b.Set(x.Name, x.Value) })
		if _, err := app.Append(0, b.Labels(), ts, v); err != nil {
			return err
		}
	}
}

// firing evaluates every rule at each step of the timeline, as
// Prometheus's rule manager does every scrapeInterval, and returns the
// alerts firing at the end, by name, with their instances' labels.
func (tl *timeline) firing(t *testing.T, rs []*rules.AlertingRule) map[string][]string {
	t.Helper()
	engine := promql.NewEngine(promql.EngineOpts{MaxSamples: 1e6, Timeout: time.Minute, LookbackDelta: 5 * time.Minute})
	query := rules.EngineQueryFunc(engine, tl.st)
	for i := range tl.steps {
		ts := tl.t0.Add(time.Duration(i) * scrapeInterval)
		for _, r := range rs {
			if _, err := r.Eval(context.Background(), 0, ts, query, nil, 0); err != nil {
				t.Fatalf("%s at step %d: %v", r.Name(), i, err)
			}
		}
	}
	out := map[string][]string{}
	for _, r := range rs {
		for _, a := range r.ActiveAlerts() {
			if a.State != rules.StateFiring {
				continue
			}
			out[r.Name()] = append(out[r.Name()], a.Labels.String())
			a.Annotations.Range(func(l labels.Label) {
				if strings.Contains(l.Value, "error expanding") || strings.Contains(l.Value, "<no value>") {
					t.Errorf("%s: annotation %s = %q", r.Name(), l.Name, l.Value)
				}
			})
		}
	}
	return out
}

// wantFiring checks that exactly the alerts named fire.
func wantFiring(t *testing.T, got map[string][]string, want ...string) {
	t.Helper()
	var names []string
	for n, instances := range got {
		names = append(names, n)
		t.Logf("firing: %s %v", n, instances)
	}
	slices.Sort(names)
	slices.Sort(want)
	if !slices.Equal(names, want) {
		t.Errorf("firing alerts %v; want exactly %v", names, want)
	}
}

// run scrapes the targets n times, about a second apart, calling each
// (when not nil) before each scrape.
func (tl *timeline) run(t *testing.T, n int, each func(step int), targets ...target) {
	t.Helper()
	for i := range n {
		if each != nil {
			each(i)
		}
		tl.scrape(t, targets...)
		time.Sleep(tl.pace)
	}
}

// TestAlerts: every alert of the PrometheusRule, evaluated by Prometheus's
// rule engine on what a real agent and driver export, is silent on a
// healthy node and fires (alone) where its condition is real.
func TestAlerts(t *testing.T) {
	mounttest.RequireMounts(t)
	rs := loadRules(t)
	var names []string
	for _, r := range rs {
		names = append(names, r.Name())
	}
	t.Logf("alerts: %v", names)
	// The scenarios run in parallel: each evaluates rules of its own (a
	// rule keeps its alerts' state between evaluations, so one shared by
	// two scenarios would mix their timelines), and marks what it tested
	// under a lock.
	var mu sync.Mutex
	tested := map[string]bool{}
	defer func() {
		for _, n := range names {
			if !tested[n] {
				t.Errorf("alert %s has no scenario that makes it fire", n)
			}
		}
	}()
	fire := func(t *testing.T, tl *timeline, want ...string) {
		t.Helper()
		wantFiring(t, tl.firing(t, loadRules(t)), want...)
		mu.Lock()
		for _, w := range want {
			tested[w] = true
		}
		mu.Unlock()
	}

	// Sequential, before the others: with a 1 h interval the agent scans
	// only when the mount table changes, which the other scenarios do.
	t.Run("stalled", func(t *testing.T) {
		n := newNode(t, "stalled", unix.MS_SLAVE)
		agent := n.agent(t, "1h")
		tl := newTimeline(t)
		tl.run(t, scrapes, nil, processTarget("nodevol", n.name, agent))
		fire(t, tl, "NodevolScansStalled")
	})
	t.Run("group", func(t *testing.T) {
		t.Run("healthy", func(t *testing.T) {
			t.Parallel()
			n := newNode(t, "healthy", unix.MS_SLAVE)
			agent, driver := n.agent(t, "1s"), n.driver(t)
			if err := os.WriteFile(filepath.Join(driver.target, "data"), []byte("x"), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := driver.unpublish(); err != nil {
				t.Fatalf("unpublish of a healthy volume: %v", err)
			}
			tl := newTimeline(t)
			tl.run(t, scrapes, nil, processTarget("nodevol", n.name, agent), processTarget("nodevol-csi", n.name, driver.process))
			wantFiring(t, tl.firing(t, loadRules(t)))
		})
		t.Run("nas", func(t *testing.T) {
			t.Parallel()
			n := newNode(t, "nas", unix.MS_SLAVE)
			agent, driver := n.agent(t, "1s"), n.driver(t)
			// A NAS mounted on the host into the pod's emptyDir after the
			// agent started, and one in the driver's volume.
			for _, dir := range []string{filepath.Join(n.emptyDir, "nas"), filepath.Join(driver.target, "nas")} {
				if err := os.Mkdir(dir, 0o755); err != nil {
					t.Fatal(err)
				}
				mounttest.Tmpfs(t, dir, "size=1m")
			}
			tl := newTimeline(t)
			tl.run(t, scrapes, func(int) {
				if err := refusal(driver.unpublish()); !errors.Is(err, errRefused) {
					t.Errorf("unpublish of a volume holding a NAS: %v; want a refusal", err)
				}
			}, processTarget("nodevol", n.name, agent), processTarget("nodevol-csi", n.name, driver.process))
			fire(t, tl, "NodevolVolumeInDanger", "NodevolCSIUnpublishRefused")
		})
		t.Run("scan-failing", func(t *testing.T) {
			t.Parallel()
			n := newNode(t, "scan-failing", unix.MS_SLAVE)
			agent := n.agent(t, "1s")
			// The kubelet root goes from under the agent: every scan fails.
			if err := os.Rename(n.hostRoot, n.hostRoot+".gone"); err != nil {
				t.Fatal(err)
			}
			tl := newTimeline(t)
			tl.run(t, scrapes, nil, processTarget("nodevol", n.name, agent))
			fire(t, tl, "NodevolScanFailing")
		})
		t.Run("incomplete", func(t *testing.T) {
			t.Parallel()
			n := newNode(t, "incomplete", unix.MS_SLAVE)
			// A pod that fills its plugin directory past the scan's bound
			// of a directory (1,024 entries).
			for i := range 1100 {
				if err := os.Mkdir(filepath.Join(filepath.Dir(n.emptyDir), fmt.Sprintf("flood-%04d", i)), 0o750); err != nil {
					t.Fatal(err)
				}
			}
			agent := n.agent(t, "1s")
			tl := newTimeline(t)
			tl.run(t, scrapes, nil, processTarget("nodevol", n.name, agent))
			fire(t, tl, "NodevolScanIncomplete")
		})
		t.Run("blind", func(t *testing.T) {
			t.Parallel()
			// The hostPath without HostToContainer: a private view.
			n := newNode(t, "blind", unix.MS_PRIVATE)
			agent := n.agent(t, "1s")
			tl := newTimeline(t)
			tl.run(t, scrapes, nil, processTarget("nodevol", n.name, agent))
			fire(t, tl, "NodevolBlindToHostMounts")
		})
		t.Run("kubelet", func(t *testing.T) {
			t.Parallel()
			for _, flavor := range kubeletFlavors {
				t.Run(flavor, func(t *testing.T) {
					fx := readKubeletFixture(t, flavor)
					replay := func(spans ...span) *timeline {
						tl := newTimeline(t)
						tl.pace = 0
						n := 0
						for _, s := range spans {
							n += s.scrapes
						}
						tl.run(t, n, nil, fx.target("e2e-node", spans...))
						return tl
					}
					// Before the pod's deletion, for 12 minutes.
					wantFiring(t, replay(span{"healthy", scrapes}).firing(t, loadRules(t)))
					// Then a refused teardown, retried: two scrapes.
					fire(t, replay(span{"healthy", scrapes}, span{"refused-1", 1}, span{"refused-2", 1}), "KubeletEmptyDirTeardownFailing")
					// The NAS unmounted and the volume torn down: silent
					// again once the 10 minutes of the range have passed.
					wantFiring(t, replay(span{"healthy", 2}, span{"refused-1", 1}, span{"refused-2", 1}, span{"torn-down", scrapes}).firing(t, loadRules(t)))
				})
			}
		})
	})
}

// kubeletFlavors are the kubelets whose /metrics testdata/kubelet holds:
// nodevol's, which refuses the teardown of an emptyDir holding a NAS,
// and the stock kubelet, whose RemoveAll empties the NAS and then fails.
var kubeletFlavors = []string{"nodevol", "stock"}

// kubeletStages are the moments of the e2e's scenario 1-nas-tmpfs at
// which it scraped the kubelet's /metrics, in order: the pod running with
// a NAS mounted in its emptyDir; the pod's manifest removed and its first
// failed TearDown logged; two more failed (retried) TearDowns later; the
// NAS unmounted and the pod directory gone.
var kubeletStages = []string{"healthy", "refused-1", "refused-2", "torn-down"}

// kubeletFixture is what a real kubelet wrote on /metrics at each stage.
type kubeletFixture struct {
	flavor string
	stages map[string][]byte
}

// readKubeletFixture reads testdata/kubelet/<flavor>-<stage>.prom.gz, and
// checks that a kubelet v1.37 of the flavor wrote them (its
// kubernetes_build_info).
func readKubeletFixture(t *testing.T, flavor string) kubeletFixture {
	t.Helper()
	fx := kubeletFixture{flavor: flavor, stages: map[string][]byte{}}
	for _, stage := range kubeletStages {
		name := filepath.Join("testdata", "kubelet", flavor+"-"+stage+".prom.gz")
		b, err := readGzip(name)
		if err != nil {
			t.Fatal(err)
		}
		version := regexp.MustCompile(`(?m)^kubernetes_build_info\{[^}]*git_version="(v1\.37\.[0-9]+[^"]*)"`).FindSubmatch(b)
		if version == nil {
			t.Fatalf("%s: no kubernetes_build_info of a kubelet v1.37: not a kubelet's /metrics", name)
		}
		if nodevol := strings.Contains(string(version[1]), "+nodevol."); nodevol != (flavor == "nodevol") {
			t.Fatalf("%s: written by kubelet %s, not by the %s kubelet", name, version[1], flavor)
		}
		fx.stages[stage] = b
	}
	return fx
}

// readGzip is the contents of a gzipped file.
func readGzip(name string) ([]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	z, err := gzip.NewReader(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	b, err := io.ReadAll(z)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return b, nil
}

// span is a stage of the fixture scraped so many times in a row.
type span struct {
	stage   string
	scrapes int
}

// target is the kubelet of the node as Prometheus scrapes it: each scrape
// answers the next stage's exposition, span after span, the last one
// when they are over.
func (fx kubeletFixture) target(node string, spans ...span) target {
	i := 0
	return target{job: "kubelet", node: node, metrics: func() ([]byte, error) {
		stage, n := spans[len(spans)-1].stage, i
		for _, s := range spans {
			if n < s.scrapes {
				stage = s.stage
				break
			}
			n -= s.scrapes
		}
		i++
		return fx.stages[stage], nil
	}}
}
