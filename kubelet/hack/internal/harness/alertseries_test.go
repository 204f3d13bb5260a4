package harness

import (
	"slices"
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
	want := failedUnmounts("kubernetes.io/empty-dir")
	slices.Sort(sel.Labels)
	slices.Sort(want.Labels)
	if sel.Name != want.Name || !slices.Equal(sel.Labels, want.Labels) {
		t.Errorf("the rule selects %s; want %s (what the kubelet counts failed emptyDir unmounts in)", sel, want)
	}
	if _, err := alertSelector(ruleFile("../../../../deploy"), "NoSuchAlert"); err == nil {
		t.Error("a missing alert was found")
	}
}

func TestParseSelector(t *testing.T) {
	sel, err := parseSelector(`increase(m_count{a="x", b = "y/z",}[10m]) > 0`)
	if err != nil || sel.Name != "m_count" || !slices.Equal(sel.Labels, []string{`a="x"`, `b="y/z"`}) {
		t.Fatalf("parseSelector = %+v, %v", sel, err)
	}
	for _, bad := range []string{
		`m > 0`,                        // no label matcher to check
		`m{a=~"x"} > 0`,                // a regexp would be checked as a value
		`m{a!="x"} > 0`,                // likewise a negation
		`m{a="x"} / n{b="y"}`,          // two selectors
		`increase(m{a="x",b}[5m]) > 0`, // not a matcher
		`m{a="x,y"} > 0`,               // a comma in a value: the exposition's labels are split at commas
	} {
		if _, err := parseSelector(bad); err == nil {
			t.Errorf("parseSelector(%q) = nil error; want one", bad)
		}
	}
}

func TestSumSeries(t *testing.T) {
	const text = `# TYPE m counter
m_count{a="x",b="1"} 2
m_count{a="x",b="2"} 3
m_count{a="y",b="1"} 7
m_count_other{a="x"} 11
n{a="x"} 13
`
	sums, found, err := sumSeries(strings.NewReader(text),
		seriesSelector{Name: "m_count", Labels: []string{`a="x"`}},
		seriesSelector{Name: "m_count", Labels: []string{`a="x"`, `b="2"`}},
		seriesSelector{Name: "m_count", Labels: []string{`a="z"`}})
	if err != nil || !slices.Equal(sums, []float64{5, 3, 0}) || !slices.Equal(found, []bool{true, true, false}) {
		t.Fatalf("sumSeries = %v, %v, %v; want [5 3 0] [true true false]", sums, found, err)
	}
}
