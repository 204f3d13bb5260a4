// Package promtext keeps gauges, counters, histograms and summaries and
// writes them in Prometheus's text exposition format (version 0.0.4), the
// format every Prometheus server scrapes; RegisterGoMetrics and
// RegisterProcessMetrics add the Go runtime's and the process's standard
// metrics, as client_golang's Go and process collectors export them.
//
// It is for the nodevol binary, so that it need not link
// github.com/prometheus/client_golang: that package's initialisation (its
// default registry with the Go and process collectors, and the protobuf
// descriptors of client_model) runs at every start of every command, and
// made `nodevol rm` start three times slower than a Go program that does
// nothing (docs/benchmarks.md). Libraries (reconciler) and the other
// binaries keep client_golang.
//
// What it writes is what client_golang's registry and promhttp write for
// the same metrics (tests compare the bytes, and the Go and process
// families with client_golang's collectors'): families sorted by name,
// each with its HELP and TYPE lines, series sorted by label values,
// labels sorted by name, values as strconv's shortest 'g' form. A vector
// with no series is left out, as client_golang leaves it out. A summary
// is set whole (it computes no quantiles). Not covered: exemplars, native
// histograms, OpenMetrics and protobuf negotiation, and compression.
package promtext

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"
)

// ContentType is the media type of what WriteTo writes, as promhttp
// names it (the names are legacy Prometheus names: nothing is escaped).
const ContentType = "text/plain; version=0.0.4; charset=utf-8; escaping=underscores"

// Errors, matched with errors.Is.
var (
	ErrInvalidName  = errors.New("invalid metric or label name")
	ErrInvalidLabel = errors.New("invalid label value: not UTF-8")
	ErrDuplicate    = errors.New("metric registered twice")
	ErrLabelCount   = errors.New("wrong number of label values")
)

// Labels are constant labels: name to value.
type Labels map[string]string

// Opts name a metric: its full name is Namespace_Subsystem_Name, each part
// that is not empty.
type Opts struct {
	Namespace, Subsystem, Name string
	Help                       string
}

func (o Opts) fullName() string {
	var parts []string
	for _, p := range []string{o.Namespace, o.Subsystem, o.Name} {
		if p != "" {
			parts = append(parts, p)
		}
	}
	return strings.Join(parts, "_")
}

// Registry is a set of metrics; its zero value is empty and ready. It is
// an http.Handler serving them.
type Registry struct {
	mu       sync.Mutex
	families map[string]*family
	updates  []func()
	// together is held for writing by Together, for reading by WriteTo
	// while it writes the families.
	together sync.RWMutex
}

// Together calls set with no scrape in progress, and none starts until it
// returns: a scrape sees all of set's changes or none of them (a gauge
// and the series it sums, both from the same scan).
func (r *Registry) Together(set func()) {
	r.together.Lock()
	defer r.together.Unlock()
	set()
}

// BeforeWrite has update called at the start of every WriteTo (every
// scrape), before anything is written: to set the metrics whose values
// are read when they are scraped (the Go runtime's, the process's).
// Scrapes at once call it at once.
func (r *Registry) BeforeWrite(update func()) {
	r.mu.Lock()
	r.updates = append(r.updates, update)
	r.mu.Unlock()
}

// NewRegistry is an empty Registry.
func NewRegistry() *Registry { return &Registry{} }

// kind is a family's TYPE.
type kind string

const (
	kindGauge     kind = "gauge"
	kindCounter   kind = "counter"
	kindHistogram kind = "histogram"
	kindSummary   kind = "summary"
)

// family is one metric name: its help, type, label names (constant ones
// first, in the order the series' values are kept) and series.
type family struct {
	mu         sync.Mutex
	name, help string
	kind       kind
	constNames []string // sorted
	constVals  []string
	varNames   []string
	allNames   []string            // constNames then varNames
	labelOrder []int               // all labels sorted by name, as indexes into allNames
	buckets    []float64           // histograms: upper bounds; summaries: quantiles
	series     map[string]*series  // by the variable label values, joined
	order      map[string][]string // the variable label values, by the same key
	dflt       *series             // the one series of a family without variable labels
	reg        *Registry           // the registry holding it, once registered
}

// series is one time series' value; for a histogram, its bucket counts,
// sum and count.
type series struct {
	value  float64
	counts []uint64  // histogram: per bucket, not cumulative
	quants []float64 // summary: the value of each quantile
	sum    float64
	count  uint64
}

func validName(s string, label bool) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', c == '_':
		case c == ':' && !label:
		case '0' <= c && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return !label || !strings.HasPrefix(s, "__")
}

func newFamily(o Opts, k kind, constLabels Labels, varNames []string, buckets []float64) (*family, error) {
	f := &family{name: o.fullName(), help: o.Help, kind: k, varNames: slices.Clone(varNames), buckets: buckets,
		series: map[string]*series{}, order: map[string][]string{}}
	if !validName(f.name, false) {
		return nil, fmt.Errorf("promtext: %q: %w", f.name, ErrInvalidName)
	}
	for n := range constLabels {
		f.constNames = append(f.constNames, n)
	}
	slices.Sort(f.constNames)
	for _, n := range f.constNames {
		v := constLabels[n]
		if !utf8.ValidString(v) {
			return nil, fmt.Errorf("promtext: %s{%s=%q}: %w", f.name, n, v, ErrInvalidLabel)
		}
		f.constVals = append(f.constVals, v)
	}
	f.allNames = append(slices.Clone(f.constNames), f.varNames...)
	seen := map[string]bool{}
	for _, n := range f.allNames {
		if !validName(n, true) || seen[n] || (k == kindHistogram && n == "le") || (k == kindSummary && n == "quantile") {
			return nil, fmt.Errorf("promtext: %s: label %q: %w", f.name, n, ErrInvalidName)
		}
		seen[n] = true
	}
	f.labelOrder = make([]int, len(f.allNames))
	for i := range f.labelOrder {
		f.labelOrder[i] = i
	}
	slices.SortFunc(f.labelOrder, func(a, b int) int { return strings.Compare(f.allNames[a], f.allNames[b]) })
	if len(varNames) == 0 {
		f.dflt = f.get(nil)
	}
	return f, nil
}

// get is the series of the variable label values vals, made when new.
// f.mu is held, or f is not shared yet.
func (f *family) get(vals []string) *series {
	key := strings.Join(vals, "\xff")
	s, ok := f.series[key]
	if !ok {
		s = &series{}
		switch f.kind {
		case kindHistogram:
			s.counts = make([]uint64, len(f.buckets))
		case kindSummary:
			s.quants = make([]float64, len(f.buckets))
		}
		f.series[key] = s
		f.order[key] = slices.Clone(vals)
	}
	return s
}

// with is the series of vals, checked: it panics when they are not one
// valid UTF-8 string per variable label. f.mu is held.
func (f *family) with(vals []string) *series {
	if len(vals) != len(f.varNames) {
		panic(fmt.Errorf("promtext: %s: %d label values for %d labels: %w", f.name, len(vals), len(f.varNames), ErrLabelCount))
	}
	for _, v := range vals {
		if !utf8.ValidString(v) {
			panic(fmt.Errorf("promtext: %s: label value %q: %w", f.name, v, ErrInvalidLabel))
		}
	}
	return f.get(vals)
}

// Register adds the metrics ms to r: their names must be new to r.
func (r *Registry) Register(ms ...Metric) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.families == nil {
		r.families = map[string]*family{}
	}
	for _, m := range ms {
		f := m.family()
		if _, dup := r.families[f.name]; dup || f.reg != nil {
			return fmt.Errorf("promtext: %s: %w", f.name, ErrDuplicate)
		}
	}
	for _, m := range ms {
		f := m.family()
		f.reg = r
		r.families[f.name] = f
	}
	return nil
}

// Metric is what Register takes: a Gauge, GaugeVec, Counter, CounterVec,
// Histogram or Summary.
type Metric interface{ family() *family }

// Gauge is a value that goes up and down.
type Gauge struct{ f *family }

// NewGauge is a gauge, 0 until set, with the constant labels constLabels
// (nil for none).
func NewGauge(o Opts, constLabels Labels) (*Gauge, error) {
	f, err := newFamily(o, kindGauge, constLabels, nil, nil)
	if err != nil {
		return nil, err
	}
	return &Gauge{f}, nil
}

func (g *Gauge) family() *family { return g.f }

// Set sets the gauge to v.
func (g *Gauge) Set(v float64) {
	g.f.mu.Lock()
	g.f.dflt.value = v
	g.f.mu.Unlock()
}

// Counter is a value that only goes up.
type Counter struct{ f *family }

// Set sets the counter to v: for a total that something else counts (the
// kernel's CPU time of the process, the Go runtime's allocations), read
// when it is scraped.
func (c *Counter) Set(v float64) {
	c.f.mu.Lock()
	c.f.dflt.value = v
	c.f.mu.Unlock()
}

// NewCounter is a counter at 0, with the constant labels constLabels.
func NewCounter(o Opts, constLabels Labels) (*Counter, error) {
	f, err := newFamily(o, kindCounter, constLabels, nil, nil)
	if err != nil {
		return nil, err
	}
	return &Counter{f}, nil
}

func (c *Counter) family() *family { return c.f }

// Inc adds 1.
func (c *Counter) Inc() {
	c.f.mu.Lock()
	c.f.dflt.value++
	c.f.mu.Unlock()
}

// GaugeVec is gauges by the values of variable labels: a series exists
// from its first Set or Add until Reset.
type GaugeVec struct{ f *family }

// NewGaugeVec is a GaugeVec with the variable labels labelNames and the
// constant labels constLabels.
func NewGaugeVec(o Opts, constLabels Labels, labelNames ...string) (*GaugeVec, error) {
	f, err := newFamily(o, kindGauge, constLabels, labelNames, nil)
	if err != nil {
		return nil, err
	}
	return &GaugeVec{f}, nil
}

func (g *GaugeVec) family() *family { return g.f }

// Set sets the gauge of the label values vals (one per label name, in
// their order) to v. As client_golang's WithLabelValues, it panics, with
// an error matching ErrLabelCount or ErrInvalidLabel, when vals are not
// one valid UTF-8 string per label: label values come from the caller's
// code, a fixed set, never from input as they are.
func (g *GaugeVec) Set(v float64, vals ...string) {
	g.f.mu.Lock()
	defer g.f.mu.Unlock()
	g.f.with(vals).value = v
}

// Add adds d to the gauge of the label values vals; it panics as Set does.
func (g *GaugeVec) Add(d float64, vals ...string) {
	g.f.mu.Lock()
	defer g.f.mu.Unlock()
	g.f.with(vals).value += d
}

// Reset removes every series.
func (g *GaugeVec) Reset() {
	g.f.mu.Lock()
	clear(g.f.series)
	clear(g.f.order)
	g.f.mu.Unlock()
}

// CounterVec is counters by the values of variable labels: a series
// exists from its first Inc or Add until Reset.
type CounterVec struct{ f *family }

// NewCounterVec is a CounterVec with the variable labels labelNames and
// the constant labels constLabels.
func NewCounterVec(o Opts, constLabels Labels, labelNames ...string) (*CounterVec, error) {
	f, err := newFamily(o, kindCounter, constLabels, labelNames, nil)
	if err != nil {
		return nil, err
	}
	return &CounterVec{f}, nil
}

func (c *CounterVec) family() *family { return c.f }

// Add adds d (not negative: a counter only goes up) to the counter of the
// label values vals, made at 0 when new; it panics as GaugeVec.Set does,
// and when d is negative.
func (c *CounterVec) Add(d float64, vals ...string) {
	if d < 0 {
		panic(fmt.Errorf("promtext: %s: adding %v to a counter", c.f.name, d))
	}
	c.f.mu.Lock()
	defer c.f.mu.Unlock()
	c.f.with(vals).value += d
}

// Inc adds 1 to the counter of the label values vals.
func (c *CounterVec) Inc(vals ...string) { c.Add(1, vals...) }

// Histogram counts observations in buckets.
type Histogram struct{ f *family }

// NewHistogram is a histogram with the upper bounds buckets (sorted,
// increasing; +Inf is implied) and the constant labels constLabels.
func NewHistogram(o Opts, constLabels Labels, buckets []float64) (*Histogram, error) {
	if !slices.IsSorted(buckets) || slices.Contains(buckets, math.Inf(1)) || slices.ContainsFunc(buckets, math.IsNaN) {
		return nil, fmt.Errorf("promtext: %s: buckets %v: want increasing bounds, without +Inf", o.fullName(), buckets)
	}
	f, err := newFamily(o, kindHistogram, constLabels, nil, slices.Clone(buckets))
	if err != nil {
		return nil, err
	}
	return &Histogram{f}, nil
}

func (h *Histogram) family() *family { return h.f }

// Observe counts v: in the first bucket whose bound is at least v.
func (h *Histogram) Observe(v float64) {
	h.f.mu.Lock()
	defer h.f.mu.Unlock()
	s := h.f.dflt
	if i, _ := slices.BinarySearch(h.f.buckets, v); i < len(h.f.buckets) {
		s.counts[i]++
	}
	s.sum += v
	s.count++
}

// Summary is a summary whose quantiles, sum and count are read together
// from elsewhere (the Go runtime's garbage collection pauses) and set
// together; it computes no quantiles itself.
type Summary struct{ f *family }

// NewSummary is a summary of the quantiles (each in [0, 1], increasing),
// all 0 until set, with the constant labels constLabels.
func NewSummary(o Opts, constLabels Labels, quantiles []float64) (*Summary, error) {
	if !slices.IsSorted(quantiles) || slices.ContainsFunc(quantiles, func(q float64) bool { return !(q >= 0 && q <= 1) }) {
		return nil, fmt.Errorf("promtext: %s: quantiles %v: want increasing values in [0, 1]", o.fullName(), quantiles)
	}
	f, err := newFamily(o, kindSummary, constLabels, nil, slices.Clone(quantiles))
	if err != nil {
		return nil, err
	}
	return &Summary{f}, nil
}

func (s *Summary) family() *family { return s.f }

// Set sets the value of each quantile (in the order NewSummary was given
// them; it panics when there are not as many), the sum and the count.
func (s *Summary) Set(values []float64, sum float64, count uint64) {
	if len(values) != len(s.f.buckets) {
		panic(fmt.Errorf("promtext: %s: %d values for %d quantiles: %w", s.f.name, len(values), len(s.f.buckets), ErrLabelCount))
	}
	s.f.mu.Lock()
	defer s.f.mu.Unlock()
	copy(s.f.dflt.quants, values)
	s.f.dflt.sum, s.f.dflt.count = sum, count
}

// WriteTo writes every registered metric with a series, in the text
// exposition format, after the updates BeforeWrite was given.
func (r *Registry) WriteTo(w io.Writer) (int64, error) {
	r.mu.Lock()
	updates := slices.Clone(r.updates)
	r.mu.Unlock()
	for _, u := range updates {
		u()
	}
	r.mu.Lock()
	fams := make([]*family, 0, len(r.families))
	for _, f := range r.families {
		fams = append(fams, f)
	}
	r.mu.Unlock()
	slices.SortFunc(fams, func(a, b *family) int { return strings.Compare(a.name, b.name) })
	var buf bytes.Buffer
	r.together.RLock()
	for _, f := range fams {
		f.write(&buf)
	}
	r.together.RUnlock()
	n, err := w.Write(buf.Bytes())
	return int64(n), err
}

// ServeHTTP serves the metrics, whatever the request, as promhttp does.
func (r *Registry) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	var buf bytes.Buffer
	r.WriteTo(&buf) // a bytes.Buffer takes everything
	w.Header().Set("Content-Type", ContentType)
	w.Header().Set("Content-Length", strconv.Itoa(buf.Len()))
	w.Write(buf.Bytes()) // the client's error; nothing to tell it
}

// write writes f's HELP, TYPE and series lines, or nothing when it has no
// series.
func (f *family) write(buf *bytes.Buffer) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.series) == 0 {
		return
	}
	buf.WriteString("# HELP ")
	buf.WriteString(f.name)
	buf.WriteByte(' ')
	writeEscaped(buf, f.help, false)
	buf.WriteString("\n# TYPE ")
	buf.WriteString(f.name)
	buf.WriteByte(' ')
	buf.WriteString(string(f.kind))
	buf.WriteByte('\n')
	keys := make([]string, 0, len(f.series))
	for k := range f.series {
		keys = append(keys, k)
	}
	// client_golang's order: by the values of the labels sorted by name.
	sorted := func(k string) []string {
		all := append(slices.Clone(f.constVals), f.order[k]...)
		out := make([]string, len(all))
		for i, j := range f.labelOrder {
			out[i] = all[j]
		}
		return out
	}
	slices.SortFunc(keys, func(a, b string) int { return slices.Compare(sorted(a), sorted(b)) })
	for _, k := range keys {
		s := f.series[k]
		vals := sorted(k)
		names := make([]string, len(vals))
		for i, j := range f.labelOrder {
			names[i] = f.allNames[j]
		}
		switch f.kind {
		case kindHistogram:
		case kindSummary:
			for i, q := range f.buckets {
				writeSample(buf, f.name, names, vals, "quantile", formatFloat(q), s.quants[i])
			}
			writeSample(buf, f.name+"_sum", names, vals, "", "", s.sum)
			writeSample(buf, f.name+"_count", names, vals, "", "", float64(s.count))
			continue
		default:
			writeSample(buf, f.name, names, vals, "", "", s.value)
			continue
		}
		var cum uint64
		for i, b := range f.buckets {
			cum += s.counts[i]
			writeSample(buf, f.name+"_bucket", names, vals, "le", formatFloat(b), float64(cum))
		}
		writeSample(buf, f.name+"_bucket", names, vals, "le", "+Inf", float64(s.count))
		writeSample(buf, f.name+"_sum", names, vals, "", "", s.sum)
		writeSample(buf, f.name+"_count", names, vals, "", "", float64(s.count))
	}
}

// writeSample writes one line: name{labels} value, with the label
// extraName=extraVal last when extraName is not empty (le or quantile, as
// client_golang puts them).
func writeSample(buf *bytes.Buffer, name string, names, vals []string, extraName, extraVal string, v float64) {
	buf.WriteString(name)
	if len(names) > 0 || extraName != "" {
		buf.WriteByte('{')
		for i, n := range names {
			if i > 0 {
				buf.WriteByte(',')
			}
			buf.WriteString(n)
			buf.WriteString(`="`)
			writeEscaped(buf, vals[i], true)
			buf.WriteByte('"')
		}
		if extraName != "" {
			if len(names) > 0 {
				buf.WriteByte(',')
			}
			buf.WriteString(extraName)
			buf.WriteString(`="`)
			buf.WriteString(extraVal)
			buf.WriteByte('"')
		}
		buf.WriteByte('}')
	}
	buf.WriteByte(' ')
	buf.WriteString(formatFloat(v))
	buf.WriteByte('\n')
}

// writeEscaped writes s with \ and newline escaped, and " too in a label
// value.
func writeEscaped(buf *bytes.Buffer, s string, quote bool) {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\\':
			buf.WriteString(`\\`)
		case c == '\n':
			buf.WriteString(`\n`)
		case c == '"' && quote:
			buf.WriteString(`\"`)
		default:
			buf.WriteByte(c)
		}
	}
}

// formatFloat is v as the text format writes it.
func formatFloat(v float64) string {
	switch {
	case math.IsInf(v, 1):
		return "+Inf"
	case math.IsInf(v, -1):
		return "-Inf"
	case math.IsNaN(v):
		return "NaN"
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}
