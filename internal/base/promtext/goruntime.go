package promtext

import (
	"errors"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// RegisterGoMetrics registers on r the Go runtime's metrics as
// client_golang's Go collector (collectors.NewGoCollector(), its defaults)
// exports them: the same names, types, help and labels, the values read
// from the same sources (runtime/metrics, debug.ReadGCStats) at every
// scrape. Dashboards and alerts written for any Go exporter
// (go_goroutines, go_memstats_heap_inuse_bytes, go_gc_duration_seconds)
// work unchanged.
func RegisterGoMetrics(r *Registry) error {
	g := &goMetrics{}
	var errs []error
	gauge := func(name, help string, l Labels) *Gauge {
		m, err := NewGauge(Opts{Name: name, Help: help}, l)
		errs = append(errs, err)
		return m
	}
	counter := func(name, help string) *Counter {
		m, err := NewCounter(Opts{Name: name, Help: help}, nil)
		errs = append(errs, err)
		return m
	}
	var err error
	g.gc, err = NewSummary(Opts{Name: "go_gc_duration_seconds",
		Help: "A summary of the wall-time pause (stop-the-world) duration in garbage collection cycles."}, nil,
		[]float64{0, 0.25, 0.5, 0.75, 1})
	errs = append(errs, err)
	g.goroutines = gauge("go_goroutines", "Number of goroutines that currently exist.", nil)
	g.threads = gauge("go_threads", "Number of OS threads created.", nil)
	g.lastGC = gauge("go_memstats_last_gc_time_seconds", "Number of seconds since 1970 of last garbage collection.", nil)
	info := gauge("go_info", "Information about the Go environment.", Labels{"version": runtime.Version()})
	metricsOut := []Metric{g.gc, g.goroutines, g.threads, g.lastGC, info}
	// The runtime/metrics client_golang exports by default, under the
	// names it derives from theirs, with their own descriptions: what
	// this Go version has of them.
	for _, d := range metrics.All() {
		name := defaultRuntimeMetric(d.Name)
		if name == "" {
			continue
		}
		g.samples = append(g.samples, metrics.Sample{Name: d.Name})
		m := gauge(name, d.Description+" Sourced from "+d.Name+".", nil)
		g.rm = append(g.rm, m)
		metricsOut = append(metricsOut, m)
	}
	g.memFirst = len(g.samples)
	for _, name := range memStatsSources {
		g.samples = append(g.samples, metrics.Sample{Name: name})
	}
	for _, ms := range memStats {
		var m Metric
		if ms.counter {
			c := counter("go_memstats_"+ms.name, ms.help)
			g.mem = append(g.mem, func(v float64) { c.Set(v) })
			m = c
		} else {
			gg := gauge("go_memstats_"+ms.name, ms.help, nil)
			g.mem = append(g.mem, gg.Set)
			m = gg
		}
		metricsOut = append(metricsOut, m)
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if err := r.Register(metricsOut...); err != nil {
		return err
	}
	info.Set(1)
	r.BeforeWrite(g.update)
	return nil
}

// defaultRuntimeMetric is the name client_golang's Go collector exports
// the runtime metric rm under by default, or "" when it does not export
// it. A switch, not a map: a map is built at every start of every
// command.
func defaultRuntimeMetric(rm string) string {
	switch rm {
	case "/gc/gogc:percent":
		return "go_gc_gogc_percent"
	case "/gc/gomemlimit:bytes":
		return "go_gc_gomemlimit_bytes"
	case "/sched/gomaxprocs:threads":
		return "go_sched_gomaxprocs_threads"
	}
	return ""
}

// goMetrics are RegisterGoMetrics's metrics and what it reads for them.
type goMetrics struct {
	gc                          *Summary
	goroutines, threads, lastGC *Gauge
	rm                          []*Gauge // the first len(rm) samples
	mem                         []func(float64)
	memFirst                    int // the index of memStatsSources[0] in samples

	samples []metrics.Sample // the names to read; update reads a copy
}

// memStatsSources are the runtime/metrics client_golang computes its
// go_memstats_* values from (the runtime's MemStats without stopping the
// world), in the order memStats's sums index them.
var memStatsSources = []string{
	"/gc/heap/tiny/allocs:objects",                // 0
	"/gc/heap/allocs:objects",                     // 1
	"/gc/heap/frees:objects",                      // 2
	"/gc/heap/allocs:bytes",                       // 3
	"/gc/heap/objects:objects",                    // 4
	"/gc/heap/goal:bytes",                         // 5
	"/memory/classes/total:bytes",                 // 6
	"/memory/classes/heap/objects:bytes",          // 7
	"/memory/classes/heap/unused:bytes",           // 8
	"/memory/classes/heap/released:bytes",         // 9
	"/memory/classes/heap/free:bytes",             // 10
	"/memory/classes/heap/stacks:bytes",           // 11
	"/memory/classes/os-stacks:bytes",             // 12
	"/memory/classes/metadata/mspan/inuse:bytes",  // 13
	"/memory/classes/metadata/mspan/free:bytes",   // 14
	"/memory/classes/metadata/mcache/inuse:bytes", // 15
	"/memory/classes/metadata/mcache/free:bytes",  // 16
	"/memory/classes/profiling/buckets:bytes",     // 17
	"/memory/classes/metadata/other:bytes",        // 18
	"/memory/classes/other:bytes",                 // 19
}

// memStats are client_golang's go_memstats_* metrics (but
// last_gc_time_seconds): name after go_memstats_, counter or gauge, help,
// and the memStatsSources whose sum is the value.
var memStats = []struct {
	name    string
	counter bool
	help    string
	sum     []int
}{
	{"alloc_bytes", false, "Number of bytes allocated in heap and currently in use. Equals to /memory/classes/heap/objects:bytes.", []int{7}},
	{"alloc_bytes_total", true, "Total number of bytes allocated in heap until now, even if released already. Equals to /gc/heap/allocs:bytes.", []int{3}},
	{"sys_bytes", false, "Number of bytes obtained from system. Equals to /memory/classes/total:byte.", []int{6}},
	{"mallocs_total", true, "Total number of heap objects allocated, both live and gc-ed. Semantically a counter version for go_memstats_heap_objects gauge. Equals to /gc/heap/allocs:objects + /gc/heap/tiny/allocs:objects.", []int{1, 0}},
	{"frees_total", true, "Total number of heap objects frees. Equals to /gc/heap/frees:objects + /gc/heap/tiny/allocs:objects.", []int{2, 0}},
	{"heap_alloc_bytes", false, "Number of heap bytes allocated and currently in use, same as go_memstats_alloc_bytes. Equals to /memory/classes/heap/objects:bytes.", []int{7}},
	{"heap_sys_bytes", false, "Number of heap bytes obtained from system. Equals to /memory/classes/heap/objects:bytes + /memory/classes/heap/unused:bytes + /memory/classes/heap/released:bytes + /memory/classes/heap/free:bytes.", []int{7, 8, 9, 10}},
	{"heap_idle_bytes", false, "Number of heap bytes waiting to be used. Equals to /memory/classes/heap/released:bytes + /memory/classes/heap/free:bytes.", []int{9, 10}},
	{"heap_inuse_bytes", false, "Number of heap bytes that are in use. Equals to /memory/classes/heap/objects:bytes + /memory/classes/heap/unused:bytes", []int{7, 8}},
	{"heap_released_bytes", false, "Number of heap bytes released to OS. Equals to /memory/classes/heap/released:bytes.", []int{9}},
	{"heap_objects", false, "Number of currently allocated objects. Equals to /gc/heap/objects:objects.", []int{4}},
	{"stack_inuse_bytes", false, "Number of bytes obtained from system for stack allocator in non-CGO environments. Equals to /memory/classes/heap/stacks:bytes.", []int{11}},
	{"stack_sys_bytes", false, "Number of bytes obtained from system for stack allocator. Equals to /memory/classes/heap/stacks:bytes + /memory/classes/os-stacks:bytes.", []int{11, 12}},
	{"mspan_inuse_bytes", false, "Number of bytes in use by mspan structures. Equals to /memory/classes/metadata/mspan/inuse:bytes.", []int{13}},
	{"mspan_sys_bytes", false, "Number of bytes used for mspan structures obtained from system. Equals to /memory/classes/metadata/mspan/inuse:bytes + /memory/classes/metadata/mspan/free:bytes.", []int{13, 14}},
	{"mcache_inuse_bytes", false, "Number of bytes in use by mcache structures. Equals to /memory/classes/metadata/mcache/inuse:bytes.", []int{15}},
	{"mcache_sys_bytes", false, "Number of bytes used for mcache structures obtained from system. Equals to /memory/classes/metadata/mcache/inuse:bytes + /memory/classes/metadata/mcache/free:bytes.", []int{15, 16}},
	{"buck_hash_sys_bytes", false, "Number of bytes used by the profiling bucket hash table. Equals to /memory/classes/profiling/buckets:bytes.", []int{17}},
	{"gc_sys_bytes", false, "Number of bytes used for garbage collection system metadata. Equals to /memory/classes/metadata/other:bytes.", []int{18}},
	{"other_sys_bytes", false, "Number of bytes used for other system allocations. Equals to /memory/classes/other:bytes.", []int{19}},
	{"next_gc_bytes", false, "Number of heap bytes when next garbage collection will take place. Equals to /gc/heap/goal:bytes.", []int{5}},
}

// update reads the runtime's figures and sets the metrics.
func (g *goMetrics) update() {
	g.goroutines.Set(float64(runtime.NumGoroutine()))
	threads, _ := runtime.ThreadCreateProfile(nil)
	g.threads.Set(float64(threads))
	var st debug.GCStats
	st.PauseQuantiles = make([]time.Duration, 5) // min, 25%, 50%, 75%, max
	debug.ReadGCStats(&st)
	q := make([]float64, len(st.PauseQuantiles))
	for i, d := range st.PauseQuantiles {
		q[i] = d.Seconds()
	}
	g.gc.Set(q, st.PauseTotal.Seconds(), uint64(st.NumGC))
	g.lastGC.Set(float64(st.LastGC.UnixNano()) / 1e9)

	// A fresh buffer each time: scrapes at once must not share one.
	samples := make([]metrics.Sample, len(g.samples))
	copy(samples, g.samples)
	metrics.Read(samples)
	for i, m := range g.rm {
		m.Set(sampleValue(samples[i].Value))
	}
	src := samples[g.memFirst:]
	for i, ms := range memStats {
		var v uint64
		for _, j := range ms.sum {
			if src[j].Value.Kind() == metrics.KindUint64 { // KindBad: this Go has no such metric; 0, as client_golang
				v += src[j].Value.Uint64()
			}
		}
		g.mem[i](float64(v))
	}
}

// sampleValue is a scalar runtime/metrics value as a float; 0 for a kind
// that is not a scalar (a metric this Go does not have).
func sampleValue(v metrics.Value) float64 {
	switch v.Kind() {
	case metrics.KindUint64:
		return float64(v.Uint64())
	case metrics.KindFloat64:
		return v.Float64()
	}
	return 0
}
