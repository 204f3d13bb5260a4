package promtext

import "errors"

// RegisterProcessMetrics registers on r the process's metrics as
// client_golang's process collector (collectors.NewProcessCollector with
// no options) exports them on Linux: the same names, types and help, the
// values read from the same sources (/proc/self/stat, /proc/self/fd,
// /proc/self/net/netstat, the resource limits) at every scrape:
// process_cpu_seconds_total, process_open_fds, process_max_fds,
// process_virtual_memory_bytes, process_virtual_memory_max_bytes,
// process_resident_memory_bytes, process_start_time_seconds,
// process_network_receive_bytes_total and
// process_network_transmit_bytes_total. A value that cannot be read at a
// scrape keeps its last reading (client_golang leaves the series out of
// that scrape). On other systems it registers nothing and says so
// (errors.Is(err, errors.ErrUnsupported)).
func RegisterProcessMetrics(r *Registry) error {
	p := &processMetrics{}
	var errs []error
	gauge := func(name, help string) *Gauge {
		m, err := NewGauge(Opts{Name: name, Help: help}, nil)
		errs = append(errs, err)
		return m
	}
	counter := func(name, help string) *Counter {
		m, err := NewCounter(Opts{Name: name, Help: help}, nil)
		errs = append(errs, err)
		return m
	}
	p.cpu = counter("process_cpu_seconds_total", "Total user and system CPU time spent in seconds.")
	p.openFDs = gauge("process_open_fds", "Number of open file descriptors.")
	p.maxFDs = gauge("process_max_fds", "Maximum number of open file descriptors.")
	p.vsize = gauge("process_virtual_memory_bytes", "Virtual memory size in bytes.")
	p.maxVsize = gauge("process_virtual_memory_max_bytes", "Maximum amount of virtual memory available in bytes.")
	p.rss = gauge("process_resident_memory_bytes", "Resident memory size in bytes.")
	p.start = gauge("process_start_time_seconds", "Start time of the process since unix epoch in seconds.")
	p.received = counter("process_network_receive_bytes_total", "Number of bytes received by the process over the network.")
	p.sent = counter("process_network_transmit_bytes_total", "Number of bytes sent by the process over the network.")
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if !processMetricsSupported {
		return errors.ErrUnsupported
	}
	if err := r.Register(p.cpu, p.openFDs, p.maxFDs, p.vsize, p.maxVsize, p.rss, p.start, p.received, p.sent); err != nil {
		return err
	}
	p.update()
	r.BeforeWrite(p.update)
	return nil
}

// processMetrics are RegisterProcessMetrics's metrics.
type processMetrics struct {
	cpu, received, sent                          *Counter
	openFDs, maxFDs, vsize, maxVsize, rss, start *Gauge
}
