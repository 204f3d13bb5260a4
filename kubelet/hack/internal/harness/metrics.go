package harness

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// metrics are the metric families of one scrape.
type metrics map[string]*dto.MetricFamily

// scrape reads the exporter's /metrics (Prometheus text format).
func scrape(ctx context.Context, client *http.Client, url string) (metrics, error) {
	return scrapeAs(ctx, client, url, "")
}

// scrapeAs is scrape with a bearer token ("": none).
func scrapeAs(ctx context.Context, client *http.Client, url, token string) (metrics, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return parseMetrics(resp.Body)
}

// parseMetrics parses the Prometheus text format.
func parseMetrics(r io.Reader) (metrics, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("parsing metrics: %w", err)
	}
	return metrics(fams), nil
}

// family is the family of the series name, and which of its values the
// series is: "" for a gauge's, counter's or untyped family's own name,
// "_count" or "_sum" for those series of a histogram or summary (the
// text format writes storage_operation_duration_seconds_count as a
// series of the histogram storage_operation_duration_seconds).
func (m metrics) family(name string) (*dto.MetricFamily, string) {
	if fam := m[name]; fam != nil {
		return fam, ""
	}
	for _, suffix := range []string{"_count", "_sum"} {
		base, ok := strings.CutSuffix(name, suffix)
		if fam := m[base]; ok && fam != nil && (fam.GetType() == dto.MetricType_HISTOGRAM || fam.GetType() == dto.MetricType_SUMMARY) {
			return fam, suffix
		}
	}
	return nil, ""
}

// matching is the series name (a gauge, counter or untyped family, or a
// histogram's or summary's _count or _sum) whose labels include want.
func (m metrics) matching(name string, want map[string]string) []*dto.Metric {
	fam, _ := m.family(name)
	if fam == nil {
		return nil
	}
	var out []*dto.Metric
	for _, s := range fam.GetMetric() {
		have := map[string]string{}
		for _, l := range s.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		ok := true
		for k, v := range want {
			if have[k] != v {
				ok = false
			}
		}
		if ok {
			out = append(out, s)
		}
	}
	return out
}

// value sums the matching series.
func (m metrics) value(name string, want map[string]string) float64 {
	_, suffix := m.family(name)
	var sum float64
	for _, s := range m.matching(name, want) {
		sum += sampleValue(s, suffix)
	}
	return sum
}

// sampleValue is a gauge's, counter's or untyped series' value, or (suffix
// "_count" or "_sum") a histogram's or summary's count or sum.
func sampleValue(s *dto.Metric, suffix string) float64 {
	switch {
	case suffix == "_count" && s.GetHistogram() != nil:
		return float64(s.GetHistogram().GetSampleCount())
	case suffix == "_sum" && s.GetHistogram() != nil:
		return s.GetHistogram().GetSampleSum()
	case suffix == "_count" && s.GetSummary() != nil:
		return float64(s.GetSummary().GetSampleCount())
	case suffix == "_sum" && s.GetSummary() != nil:
		return s.GetSummary().GetSampleSum()
	case s.GetGauge() != nil:
		return s.GetGauge().GetValue()
	case s.GetCounter() != nil:
		return s.GetCounter().GetValue()
	case s.GetUntyped() != nil:
		return s.GetUntyped().GetValue()
	}
	return 0
}

// count is the number of matching series.
func (m metrics) count(name string, want map[string]string) int {
	return len(m.matching(name, want))
}

// series prints the family's series, for the report: name{l="v",...} value.
func (m metrics) series(name string) string {
	fam := m[name]
	if fam == nil || len(fam.GetMetric()) == 0 {
		return name + " (none)"
	}
	var parts []string
	for _, s := range fam.GetMetric() {
		var ls []string
		for _, l := range s.GetLabel() {
			ls = append(ls, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
		}
		parts = append(parts, fmt.Sprintf("%s{%s} %g", name, strings.Join(ls, ","), sampleValue(s, "")))
	}
	return strings.Join(parts, ", ")
}
