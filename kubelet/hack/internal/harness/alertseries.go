package harness

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"sigs.k8s.io/yaml"
)

// kubeletTeardownAlert is the alert of deploy/prometheus-operator's
// PrometheusRule on the kubelet's own metric that the NAS scenarios check
// against the real kubelet: the series its expression selects must exist
// and grow with each refused TearDown.
const kubeletTeardownAlert = "KubeletEmptyDirTeardownFailing"

// ruleFile is the PrometheusRule in the manifests directory (-deploy).
func ruleFile(deployDir string) string {
	return filepath.Join(deployDir, "prometheus-operator", "prometheusrule.yaml")
}

// seriesSelector selects series of a scrape: a metric name (a histogram's
// _count included) and the labels the series must have (equality
// matchers), summed over the others.
type seriesSelector struct {
	Name   string            `json:"name"`
	Labels map[string]string `json:"labels"`
}

func (s seriesSelector) String() string {
	var ls []string
	for _, k := range slices.Sorted(maps.Keys(s.Labels)) {
		ls = append(ls, fmt.Sprintf("%s=%q", k, s.Labels[k]))
	}
	return s.Name + "{" + strings.Join(ls, ",") + "}"
}

// sum is the sum of the selected series, and whether there is one.
func (s seriesSelector) sum(m metrics) (float64, bool) {
	return m.value(s.Name, s.Labels), m.count(s.Name, s.Labels) > 0
}

// failedUnmounts is the kubelet's count of failed unmount operations of a
// plugin (the metric's volume_plugin label: "kubernetes.io/empty-dir",
// "kubernetes.io/csi:<driver>").
func failedUnmounts(plugin string) seriesSelector {
	return seriesSelector{Name: "storage_operation_duration_seconds_count", Labels: map[string]string{
		"operation_name": "volume_unmount", "status": "fail-unknown", "volume_plugin": plugin,
	}}
}

// alertSelector reads the PrometheusRule file and returns the one series
// selector of the named alert's expression.
func alertSelector(file, alert string) (seriesSelector, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return seriesSelector{}, err
	}
	var pr struct {
		Spec struct {
			Groups []struct {
				Rules []struct {
					Alert string `json:"alert"`
					Expr  string `json:"expr"`
				} `json:"rules"`
			} `json:"groups"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(b, &pr); err != nil {
		return seriesSelector{}, fmt.Errorf("%s: %w", file, err)
	}
	for _, g := range pr.Spec.Groups {
		for _, r := range g.Rules {
			if r.Alert != alert {
				continue
			}
			sel, err := parseSelector(r.Expr)
			if err != nil {
				return seriesSelector{}, fmt.Errorf("%s: alert %s: %w", file, alert, err)
			}
			return sel, nil
		}
	}
	return seriesSelector{}, fmt.Errorf("%s: no alert %s", file, alert)
}

var (
	selectorRe = regexp.MustCompile(`([a-zA-Z_:][a-zA-Z0-9_:]*)\{((?:[^}"]|"(?:[^"\\]|\\.)*")*)\}`)
	matcherRe  = regexp.MustCompile(`^\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*("(?:[^"\\]|\\.)*")\s*(?:,|$)`)
)

// parseSelector returns the one selector with label matchers in a PromQL
// expression. Only equality matchers are understood: anything else is an
// error rather than a check of something else than the rule selects.
func parseSelector(expr string) (seriesSelector, error) {
	m := selectorRe.FindAllStringSubmatch(expr, -1)
	if len(m) != 1 {
		return seriesSelector{}, fmt.Errorf("expression %q: want exactly one selector name{label=\"value\", …}, found %d", expr, len(m))
	}
	sel := seriesSelector{Name: m[0][1], Labels: map[string]string{}}
	for rest := m[0][2]; strings.TrimSpace(rest) != ""; {
		lm := matcherRe.FindStringSubmatch(rest)
		if lm == nil || lm[2] != "=" {
			return seriesSelector{}, fmt.Errorf("expression %q: matchers %q: only label=\"value\" is understood", expr, strings.TrimSpace(rest))
		}
		v, err := strconv.Unquote(lm[3])
		if err != nil {
			return seriesSelector{}, fmt.Errorf("expression %q: matcher %s: %w", expr, lm[0], err)
		}
		if _, dup := sel.Labels[lm[1]]; dup {
			return seriesSelector{}, fmt.Errorf("expression %q: label %s matched twice", expr, lm[1])
		}
		sel.Labels[lm[1]] = v
		rest = rest[len(lm[0]):]
	}
	if len(sel.Labels) == 0 {
		return seriesSelector{}, fmt.Errorf("expression %q: the selector has no label matcher", expr)
	}
	return sel, nil
}

// alertScrapes scrapes the kubelet's /metrics at the stages of a
// scenario, keeps each exposition in dir (kubelet-metrics-<stage>.prom:
// what monitoring/testdata/kubelet holds, see its README) and sums the
// series the alert selects.
type alertScrapes struct {
	k   *kubelet
	sel seriesSelector
	dir string
}

// scrape reads /metrics, writes it to the stage's file and returns the
// sum of the selected series (0 when there is none, found false).
func (a alertScrapes) scrape(ctx context.Context, stage string) (v float64, found bool, err error) {
	body, err := a.k.metrics(ctx)
	if err != nil {
		return 0, false, err
	}
	if err := os.WriteFile(filepath.Join(a.dir, "kubelet-metrics-"+stage+".prom"), body, 0o644); err != nil {
		return 0, false, err
	}
	m, err := parseMetrics(bytes.NewReader(body))
	if err != nil {
		return 0, false, fmt.Errorf("the kubelet's /metrics (%s): %w", stage, err)
	}
	v, found = a.sel.sum(m)
	return v, found, nil
}
