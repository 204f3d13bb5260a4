package reconciler

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nodevol/nodevol/mountdetect"
	"github.com/nodevol/nodevol/reconciler/pendingops"
)

type metrics struct {
	opDuration *prometheus.HistogramVec
	volumes    *prometheus.GaugeVec
	refused    *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		opDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "nodevol",
			Name:      "volume_operation_duration_seconds",
			Help:      "Duration of volume operations by operation, plugin and status (success or fail).",
			Buckets:   []float64{.001, .005, .025, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120},
		}, []string{"operation", "plugin", "status"}),
		volumes: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "nodevol",
			Name:      "volumes",
			Help:      "Volumes in the actual state of world by plugin and state (mounted, uncertain).",
		}, []string{"plugin", "state"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "nodevol",
			Name:      "teardown_refused_total",
			Help:      "Teardowns refused because a mount was found in the volume (nothing was deleted).",
		}, []string{"plugin"}),
	}
	if reg != nil {
		var err error
		if m.opDuration, err = register(reg, m.opDuration); err != nil {
			return nil, err
		}
		if m.volumes, err = register(reg, m.volumes); err != nil {
			return nil, err
		}
		if m.refused, err = register(reg, m.refused); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// register registers c, or — following client_golang's convention for
// AlreadyRegisteredError — returns the identical collector registered
// before (by another Manager on the same registerer), which this Manager
// then shares: counters and histograms add up over Managers, and the
// gauge counts the volumes of all of them. Wrap the registerer
// (prometheus.WrapRegistererWith) to tell Managers apart.
func register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	err := reg.Register(c)
	if err == nil {
		return c, nil
	}
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing, nil
		}
	}
	return c, err
}

func (m *metrics) finish(op pendingops.OpName, plugin string, err error, d time.Duration) {
	status := "success"
	if err != nil {
		status = "fail"
		if op == pendingops.OpUnmount && errors.Is(err, mountdetect.ErrCrossesMount) {
			m.refused.WithLabelValues(plugin).Inc()
		}
	}
	m.opDuration.WithLabelValues(string(op), plugin, status).Observe(d.Seconds())
}

func (m *metrics) gauge(plugin string, s MountState, delta float64) {
	m.volumes.WithLabelValues(plugin, s.String()).Add(delta)
}
