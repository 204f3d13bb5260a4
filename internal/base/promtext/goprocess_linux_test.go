package promtext

import (
	"math"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// scrape serves h's /metrics to a request and parses the answer with
// Prometheus's own text parser, as a Prometheus server reads a scrape.
func scrape(t *testing.T, h http.Handler) map[string]*dto.MetricFamily {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != 200 {
		t.Fatalf("scrape: status %d: %s", rec.Code, rec.Body)
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(rec.Body)
	if err != nil {
		t.Fatalf("scrape does not parse: %v\n%s", err, rec.Body)
	}
	return fams
}

// TestGoAndProcessMetricsAsClientGolang: RegisterGoMetrics and
// RegisterProcessMetrics export every family client_golang's Go and
// process collectors export (what dashboards, alerts and the soak read:
// go_goroutines, process_resident_memory_bytes, process_open_fds), with
// the same type, help and label names, nothing else, in a scrape
// Prometheus's parser reads; and the same values where they cannot have
// changed between the two scrapes, and between two of theirs where they
// only go up.
func TestGoAndProcessMetricsAsClientGolang(t *testing.T) {
	theirs := prometheus.NewRegistry()
	theirs.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	theirH := promhttp.HandlerFor(theirs, promhttp.HandlerOpts{})
	ours := NewRegistry()
	if err := RegisterGoMetrics(ours); err != nil {
		t.Fatal(err)
	}
	if err := RegisterProcessMetrics(ours); err != nil {
		t.Fatal(err)
	}

	before := scrape(t, theirH)
	got := scrape(t, ours)
	after := scrape(t, theirH)

	for name, want := range before {
		g, ok := got[name]
		if !ok {
			t.Errorf("%s: missing", name)
			continue
		}
		if g.GetType() != want.GetType() || g.GetHelp() != want.GetHelp() {
			t.Errorf("%s: type %v, help %q; client_golang: %v, %q", name, g.GetType(), g.GetHelp(), want.GetType(), want.GetHelp())
		}
		if gl, wl := labelNames(g), labelNames(want); !slices.Equal(gl, wl) {
			t.Errorf("%s: labels %v; client_golang: %v", name, gl, wl)
		}
	}
	for name := range got {
		if _, ok := before[name]; !ok {
			t.Errorf("%s: not exported by client_golang", name)
		}
	}

	// Values that do not change while the test runs.
	for _, name := range []string{"go_info", "go_gc_gogc_percent", "go_gc_gomemlimit_bytes", "go_sched_gomaxprocs_threads",
		"process_max_fds", "process_virtual_memory_max_bytes"} {
		if g, w := value(t, got, name), value(t, before, name); g != w {
			t.Errorf("%s = %v; client_golang: %v", name, g, w)
		}
	}
	if g := got["go_info"].GetMetric()[0].GetLabel()[0].GetValue(); g != runtime.Version() {
		t.Errorf("go_info{version=%q}; want %q", g, runtime.Version())
	}
	// /proc/stat's btime moves by a second now and then (it is the
	// realtime clock less the uptime).
	if g, w := value(t, got, "process_start_time_seconds"), value(t, before, "process_start_time_seconds"); math.Abs(g-w) > 1.01 {
		t.Errorf("process_start_time_seconds = %v; client_golang: %v", g, w)
	}
	// What only goes up: between client_golang's two scrapes.
	for _, name := range []string{"process_cpu_seconds_total", "process_network_receive_bytes_total", "process_network_transmit_bytes_total",
		"go_memstats_alloc_bytes_total", "go_memstats_mallocs_total", "go_memstats_frees_total"} {
		if g, lo, hi := value(t, got, name), value(t, before, name), value(t, after, name); g < lo || g > hi {
			t.Errorf("%s = %v; client_golang: %v before, %v after", name, g, lo, hi)
		}
	}
	if g, lo, hi := got["go_gc_duration_seconds"].GetMetric()[0].GetSummary().GetSampleCount(),
		before["go_gc_duration_seconds"].GetMetric()[0].GetSummary().GetSampleCount(),
		after["go_gc_duration_seconds"].GetMetric()[0].GetSummary().GetSampleCount(); g < lo || g > hi {
		t.Errorf("go_gc_duration_seconds_count = %v; client_golang: %v before, %v after", g, lo, hi)
	}
	// What moves both ways (the heap grows by whole arenas as the test
	// allocates): within a factor of 2 of client_golang's two readings.
	for _, name := range []string{"process_resident_memory_bytes", "process_virtual_memory_bytes", "go_memstats_sys_bytes", "go_memstats_heap_sys_bytes"} {
		g, b, a := value(t, got, name), value(t, before, name), value(t, after, name)
		if g < min(b, a)/2 || g > max(b, a)*2 {
			t.Errorf("%s = %v; client_golang: %v before, %v after", name, g, b, a)
		}
	}
	if g := value(t, got, "process_open_fds"); g < 3 || math.Abs(g-value(t, before, "process_open_fds")) > 2 {
		t.Errorf("process_open_fds = %v; client_golang: %v", g, value(t, before, "process_open_fds"))
	}
	if g := value(t, got, "go_goroutines"); g < 1 {
		t.Errorf("go_goroutines = %v", g)
	}
}

func labelNames(f *dto.MetricFamily) []string {
	var names []string
	for _, l := range f.GetMetric()[0].GetLabel() {
		names = append(names, l.GetName())
	}
	return names
}

// value is the value of name's one series.
func value(t *testing.T, fams map[string]*dto.MetricFamily, name string) float64 {
	t.Helper()
	f, ok := fams[name]
	if !ok || len(f.GetMetric()) != 1 {
		t.Fatalf("%s: not one series", name)
	}
	m := f.GetMetric()[0]
	switch {
	case m.Gauge != nil:
		return m.GetGauge().GetValue()
	case m.Counter != nil:
		return m.GetCounter().GetValue()
	}
	t.Fatalf("%s: neither a gauge nor a counter", name)
	return 0
}
