package harness

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
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

// seriesSelector selects series of the Prometheus text format: a metric
// name and label matchers, each label="value" as the exposition writes
// it (equality only).
type seriesSelector struct {
	Name   string   `json:"name"`
	Labels []string `json:"labels"`
}

func (s seriesSelector) String() string { return s.Name + "{" + strings.Join(s.Labels, ",") + "}" }

// failedUnmounts is the kubelet's count of failed unmount operations of a
// plugin (the metric's volume_plugin label: "kubernetes.io/empty-dir",
// "kubernetes.io/csi:<driver>").
func failedUnmounts(plugin string) seriesSelector {
	return seriesSelector{Name: "storage_operation_duration_seconds_count", Labels: []string{
		`operation_name="volume_unmount"`, `status="fail-unknown"`, `volume_plugin="` + plugin + `"`,
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
	selectorRe = regexp.MustCompile(`([a-zA-Z_:][a-zA-Z0-9_:]*)\{([^}]*)\}`)
	matcherRe  = regexp.MustCompile(`^\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\,]|\\.)*)"\s*(?:,|$)`)
)

// parseSelector returns the one selector with label matchers in a PromQL
// expression. Only equality matchers of values without a comma (what
// sumSeries compares) are understood: anything else is an error rather
// than a check of something else than the rule selects.
func parseSelector(expr string) (seriesSelector, error) {
	m := selectorRe.FindAllStringSubmatch(expr, -1)
	if len(m) != 1 {
		return seriesSelector{}, fmt.Errorf("expression %q: want exactly one selector name{label=\"value\", …}, found %d", expr, len(m))
	}
	sel := seriesSelector{Name: m[0][1]}
	for rest := m[0][2]; strings.TrimSpace(rest) != ""; {
		lm := matcherRe.FindStringSubmatch(rest)
		if lm == nil || lm[2] != "=" {
			return seriesSelector{}, fmt.Errorf("expression %q: matchers %q: only label=\"value\" is understood", expr, strings.TrimSpace(rest))
		}
		sel.Labels = append(sel.Labels, lm[1]+`="`+lm[3]+`"`)
		rest = rest[len(lm[0]):]
	}
	if len(sel.Labels) == 0 {
		return seriesSelector{}, fmt.Errorf("expression %q: the selector has no label matcher", expr)
	}
	return sel, nil
}

// sumSeries reads the Prometheus text format and returns, for each
// selector, the sum of the values of the series it selects (over the
// labels it does not name), and whether any series matched.
func sumSeries(r io.Reader, sels ...seriesSelector) (sums []float64, found []bool, err error) {
	sums, found = make([]float64, len(sels)), make([]bool, len(sels))
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		name, rest, ok := strings.Cut(line, "{")
		if !ok {
			continue
		}
		labels, value, ok := strings.Cut(rest, "} ")
		if !ok {
			continue
		}
		have := strings.Split(labels, ",")
		for i, s := range sels {
			if name != s.Name || slices.ContainsFunc(s.Labels, func(l string) bool { return !slices.Contains(have, l) }) {
				continue
			}
			v, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
			if err != nil {
				return nil, nil, fmt.Errorf("metric line %q: %w", line, err)
			}
			sums[i] += v
			found[i] = true
		}
	}
	return sums, found, sc.Err()
}

// alertScrapes scrapes the kubelet's /metrics at the stages of a
// scenario, keeps each exposition in dir (<stage>.prom: what
// monitoring/testdata/kubelet holds, see its README) and sums the series
// the alert selects.
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
	sums, ok, err := sumSeries(bytes.NewReader(body), a.sel)
	if err != nil {
		return 0, false, fmt.Errorf("the kubelet's /metrics (%s): %w", stage, err)
	}
	return sums[0], ok[0], nil
}
