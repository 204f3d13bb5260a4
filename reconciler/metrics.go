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
		for _, c := range []prometheus.Collector{m.opDuration, m.volumes, m.refused} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
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
