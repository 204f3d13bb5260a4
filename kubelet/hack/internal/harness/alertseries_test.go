package harness

import (
	"maps"
	"strings"
	"testing"
)

// The NAS scenarios check the series the shipped rule selects: the
// selector is read from deploy/'s PrometheusRule, not written again here.
func TestAlertSelectorOfShippedRule(t *testing.T) {
	sel, err := alertSelector(ruleFile("../../../../deploy"), kubeletTeardownAlert)
	if err != nil {
		t.Fatal(err)
	}
	if want := failedUnmounts("kubernetes.io/empty-dir"); sel.Name != want.Name || !maps.Equal(sel.Labels, want.Labels) {
		t.Errorf("the rule selects %s; want %s (what the kubelet counts failed emptyDir unmounts in)", sel, want)
	}
	if _, err := alertSelector(ruleFile("../../../../deploy"), "NoSuchAlert"); err == nil {
		t.Error("a missing alert was found")
	}
}

func TestParseSelector(t *testing.T) {
	sel, err := parseSelector(`increase(m_count{a="x", b = "y,}z\"",}[10m]) > 0`)
	if want := map[string]string{"a": "x", "b": `y,}z"`}; err != nil || sel.Name != "m_count" || !maps.Equal(sel.Labels, want) {
		t.Fatalf("parseSelector = %+v, %v; want m_count %v", sel, err, want)
	}
	for _, bad := range []string{
		`m > 0`,                        // no label matcher to check
		`m{a=~"x"} > 0`,                // a regexp would be checked as a value
		`m{a!="x"} > 0`,                // likewise a negation
		`m{a="x"} / n{b="y"}`,          // two selectors
		`increase(m{a="x",b}[5m]) > 0`, // not a matcher
		`m{a="x",a="y"}`,               // one label twice
	} {
		if _, err := parseSelector(bad); err == nil {
			t.Errorf("parseSelector(%q) = nil error; want one", bad)
		}
	}
}

// A histogram's _count is a series of its own in the text format, which
// the rule selects by that name.
func TestMetricsHistogramCount(t *testing.T) {
	const text = `# TYPE h histogram
h_bucket{a="x",b="1",le="+Inf"} 2
h_sum{a="x",b="1"} 0.5
h_count{a="x",b="1"} 2
h_bucket{a="x",b="2",le="+Inf"} 3
h_sum{a="x",b="2"} 0.25
h_count{a="x",b="2"} 3
h_bucket{a="y",b="1",le="+Inf"} 7
h_sum{a="y",b="1"} 1
h_count{a="y",b="1"} 7
# TYPE g gauge
g{a="x"} 11
`
	m, err := parseMetrics(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		sel   seriesSelector
		want  float64
		found bool
	}{
		{seriesSelector{"h_count", map[string]string{"a": "x"}}, 5, true},
		{seriesSelector{"h_count", map[string]string{"a": "x", "b": "2"}}, 3, true},
		{seriesSelector{"h_sum", map[string]string{"a": "x"}}, 0.75, true},
		{seriesSelector{"h_count", map[string]string{"a": "z"}}, 0, false},
		{seriesSelector{"g", map[string]string{"a": "x"}}, 11, true},
		{seriesSelector{"g_count", map[string]string{"a": "x"}}, 0, false}, // a gauge has no _count
	} {
		if v, found := c.sel.sum(m); v != c.want || found != c.found {
			t.Errorf("%s = %g, %v; want %g, %v", c.sel, v, found, c.want, c.found)
		}
	}
}
