package promtext

import (
	"bytes"
	"errors"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// TestSameBytesAsClientGolang: the same metrics, with the same values,
// written here and by client_golang's registry served through promhttp
// (what a scraper got before this package), are the same bytes: names,
// help escaping, label order and escaping, series order, value
// formatting, histogram buckets, and the families a vector without series
// leaves out.
func TestSameBytesAsClientGolang(t *testing.T) {
	const help = "A help with a \\ backslash,\na newline and \"quotes\"."
	root := Labels{"root": "/var/lib/kubelet"}
	buckets := []float64{.001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}

	ours := NewRegistry()
	vec := must(NewGaugeVec(Opts{Namespace: "ns", Subsystem: "scan", Name: "volumes", Help: help}, root, "plugin", "verdict", "reason"))
	empty := must(NewGaugeVec(Opts{Namespace: "ns", Name: "empty", Help: "None."}, root, "plugin"))
	g := must(NewGauge(Opts{Namespace: "ns", Name: "a_gauge", Help: "A gauge."}, nil))
	c := must(NewCounter(Opts{Namespace: "ns", Name: "scans_total", Help: "Scans."}, root))
	h := must(NewHistogram(Opts{Namespace: "ns", Subsystem: "scan", Name: "duration_seconds", Help: "Durations."}, root, buckets))
	info := must(NewGaugeVec(Opts{Namespace: "ns", Name: "build_info", Help: "Build."}, nil, "version", "revision", "goversion"))
	auth := must(NewCounterVec(Opts{Namespace: "ns", Name: "auth_requests_total", Help: "Requests."}, nil, "result"))
	if err := ours.Register(vec, empty, g, c, h, info, auth); err != nil {
		t.Fatal(err)
	}

	theirs := prometheus.NewRegistry()
	wrapped := prometheus.WrapRegistererWith(prometheus.Labels(root), theirs)
	pvec := prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "ns", Subsystem: "scan", Name: "volumes", Help: help}, []string{"plugin", "verdict", "reason"})
	pempty := prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "ns", Name: "empty", Help: "None."}, []string{"plugin"})
	pg := prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "ns", Name: "a_gauge", Help: "A gauge."})
	pc := prometheus.NewCounter(prometheus.CounterOpts{Namespace: "ns", Name: "scans_total", Help: "Scans."})
	ph := prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "ns", Subsystem: "scan", Name: "duration_seconds", Help: "Durations.", Buckets: buckets})
	pinfo := prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "ns", Name: "build_info", Help: "Build."}, []string{"version", "revision", "goversion"})
	pauth := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "ns", Name: "auth_requests_total", Help: "Requests."}, []string{"result"})
	wrapped.MustRegister(pvec, pempty, pc, ph)
	theirs.MustRegister(pg, pinfo, pauth)

	series := [][]string{
		{"kubernetes.io/empty-dir", "ok", "not-mounted"},
		{"kubernetes.io/empty-dir", "danger", "nested-mount"},
		{"other", "ok", "a \"quoted\" \\ value\nwith a newline"},
		{"kubernetes.io/csi", "unknown", "ünïcode"},
		{"kubernetes.io/empty-dir", "danger", "mount-point"},
	}
	for i, s := range series {
		for range i + 1 {
			vec.Add(1, s...)
			pvec.WithLabelValues(s...).Add(1)
		}
	}
	for _, v := range []float64{0, 1e-9, 0.001, 0.0049, 0.3, 1, 7.5, 11, 1e6, 1.5e-7} {
		h.Observe(v)
		ph.Observe(v)
		c.Inc()
		pc.Inc()
	}
	g.Set(1764233200.123456789)
	pg.Set(1764233200.123456789)
	info.Set(1, "v1.2.3", "", "go1.26.8")
	for _, r := range []string{"forbidden", "allowed", "allowed", "unavailable"} {
		auth.Inc(r)
		pauth.WithLabelValues(r).Inc()
	}
	auth.Add(0, "unauthenticated") // made, at 0, as WithLabelValues makes it
	pauth.WithLabelValues("unauthenticated")
	pinfo.WithLabelValues("v1.2.3", "", "go1.26.8").Set(1)
	compare(t, ours, theirs)

	vec.Reset()
	pvec.Reset()
	g.Set(math.Inf(-1))
	pg.Set(math.Inf(-1))
	compare(t, ours, theirs)
	g.Set(math.NaN())
	pg.Set(math.NaN())
	compare(t, ours, theirs)
}

func compare(t *testing.T, ours *Registry, theirs *prometheus.Registry) {
	t.Helper()
	get := func(h http.Handler) (string, []byte) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
		if rec.Code != http.StatusOK {
			t.Fatalf("GET /metrics = %d", rec.Code)
		}
		return rec.Header().Get("Content-Type"), rec.Body.Bytes()
	}
	ct, got := get(ours)
	pct, want := get(promhttp.HandlerFor(theirs, promhttp.HandlerOpts{}))
	if ct != pct {
		t.Errorf("Content-Type %q; client_golang's %q", ct, pct)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("ours:\n%s\nclient_golang's:\n%s", got, want)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func TestRefused(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want error
	}{
		{"bad name", second(NewGauge(Opts{Name: "a-b"}, nil)), ErrInvalidName},
		{"leading digit", second(NewGauge(Opts{Name: "1a"}, nil)), ErrInvalidName},
		{"bad label name", second(NewGaugeVec(Opts{Name: "a"}, nil, "a:b")), ErrInvalidName},
		{"reserved label name", second(NewGaugeVec(Opts{Name: "a"}, nil, "__x")), ErrInvalidName},
		{"label twice", second(NewGaugeVec(Opts{Name: "a"}, Labels{"x": "1"}, "x")), ErrInvalidName},
		{"le on a histogram", second(NewHistogram(Opts{Name: "a"}, Labels{"le": "1"}, nil)), ErrInvalidName},
		{"constant value not UTF-8", second(NewGauge(Opts{Name: "a"}, Labels{"root": "/var/\xff"})), ErrInvalidLabel},
	} {
		if !errors.Is(tc.err, tc.want) {
			t.Errorf("%s: %v; want %v", tc.name, tc.err, tc.want)
		}
	}
	if _, err := NewHistogram(Opts{Name: "a"}, nil, []float64{2, 1}); err == nil {
		t.Error("NewHistogram with decreasing buckets: nil error")
	}
	v := must(NewGaugeVec(Opts{Name: "a"}, nil, "x"))
	if err := panicked(func() { v.Set(1, "a", "b") }); !errors.Is(err, ErrLabelCount) {
		t.Errorf("Set with 2 values for 1 label panicked with %v; want ErrLabelCount", err)
	}
	if err := panicked(func() { v.Add(1, "\xff") }); !errors.Is(err, ErrInvalidLabel) {
		t.Errorf("Add with a value not UTF-8 panicked with %v; want ErrInvalidLabel", err)
	}
	r := NewRegistry()
	if err := r.Register(v); err != nil {
		t.Fatal(err)
	}
	if err := r.Register(must(NewGauge(Opts{Name: "a"}, nil))); !errors.Is(err, ErrDuplicate) {
		t.Errorf("Register of a second \"a\" = %v; want ErrDuplicate", err)
	}
}

func second[T any](_ T, err error) error { return err }

// panicked is the error f panicked with, nil when it returned.
func panicked(f func()) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err, _ = r.(error)
		}
	}()
	f()
	return nil
}

// TestSummaryAsClientGolang: a summary's lines are client_golang's for a
// constant summary with the same quantiles.
func TestSummaryAsClientGolang(t *testing.T) {
	ours := NewRegistry()
	s := must(NewSummary(Opts{Name: "pause_seconds", Help: "Pauses."}, Labels{"root": "/r"}, []float64{0, 0.25, 0.5, 0.75, 1}))
	if err := ours.Register(s); err != nil {
		t.Fatal(err)
	}
	s.Set([]float64{1e-5, 2e-5, 3.5e-5, 0.0001, 0.25}, 1.5, 42)
	theirs := prometheus.NewRegistry()
	desc := prometheus.NewDesc("pause_seconds", "Pauses.", nil, prometheus.Labels{"root": "/r"})
	theirs.MustRegister(constCollector{prometheus.MustNewConstSummary(desc, 42, 1.5,
		map[float64]float64{0: 1e-5, 0.25: 2e-5, 0.5: 3.5e-5, 0.75: 0.0001, 1: 0.25})})
	compare(t, ours, theirs)
	if err := panicked(func() { s.Set([]float64{1}, 0, 0) }); err == nil {
		t.Error("Set with one value for five quantiles did not panic")
	}
	for _, q := range [][]float64{{0.5, 0.25}, {1.5}, {math.NaN()}} {
		if _, err := NewSummary(Opts{Name: "x"}, nil, q); err == nil {
			t.Errorf("NewSummary(%v): no error", q)
		}
	}
}

// TestBeforeWriteRunsAtEveryScrape: the updates run before each write,
// so a scrape sees what they set.
func TestBeforeWriteRunsAtEveryScrape(t *testing.T) {
	r := NewRegistry()
	c := must(NewCounter(Opts{Name: "reads_total", Help: "Reads."}, nil))
	if err := r.Register(c); err != nil {
		t.Fatal(err)
	}
	n := 0.0
	r.BeforeWrite(func() { n++; c.Set(n) })
	for i := 1; i <= 3; i++ {
		var b bytes.Buffer
		if _, err := r.WriteTo(&b); err != nil {
			t.Fatal(err)
		}
		if want := "reads_total " + formatFloat(float64(i)) + "\n"; !strings.HasSuffix(b.String(), want) {
			t.Errorf("scrape %d:\n%s\nwant it to end in %q", i, b.String(), want)
		}
	}
}

type constCollector struct{ m prometheus.Metric }

func (c constCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.m.Desc() }
func (c constCollector) Collect(ch chan<- prometheus.Metric) { ch <- c.m }
