package driver

import (
	"context"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
)

// metrics are the driver's, on the Registerer it is given (never the
// global one).
type metrics struct {
	calls    *prometheus.CounterVec
	duration *prometheus.HistogramVec
	refused  prometheus.Counter
	// upperBound counts NodeGetVolumeStats answers that are upper bounds.
	upperBound prometheus.Counter
}

func newMetrics(reg prometheus.Registerer, name string) (*metrics, error) {
	const ns, sub = "nodevol", "csi"
	labels := prometheus.Labels{"driver": name}
	m := &metrics{
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "calls_total",
			Help: "CSI calls served, by method and gRPC status code.", ConstLabels: labels},
			[]string{"method", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub, Name: "call_duration_seconds",
			Help: "Duration of CSI calls, by method.", ConstLabels: labels,
			Buckets: []float64{.001, .005, .01, .05, .1, .5, 1, 5, 10, 30}},
			[]string{"method"}),
		refused: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "unpublish_refused_total",
			Help: "NodeUnpublishVolume calls refused because a mount that is not the volume's own is in or on it (nothing was changed; the kubelet retries).", ConstLabels: labels}),
		upperBound: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "usage_upper_bound_total",
			Help: "NodeGetVolumeStats answers whose used bytes and inodes are an upper bound: the volume holds more hard-linked files than the usage walk remembers.", ConstLabels: labels}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.calls, m.duration, m.refused, m.upperBound} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}

// Interceptor returns a gRPC unary interceptor that counts and times every
// call and logs failures other than refusals (which the Node service logs
// itself).
func (d *Driver) Interceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		start := time.Now()
		resp, err := handler(ctx, req)
		method := info.FullMethod
		method = method[strings.LastIndexByte(method, '/')+1:] // /csi.v1.Node/NodePublishVolume
		d.metrics.calls.WithLabelValues(method, status.Code(err).String()).Inc()
		d.metrics.duration.WithLabelValues(method).Observe(time.Since(start).Seconds())
		if err != nil {
			d.log.V(2).Info("CSI call failed", "method", method, "code", status.Code(err).String(), "message", status.Convert(err).Message())
		} else {
			d.log.V(4).Info("CSI call", "method", method, "duration", time.Since(start))
		}
		return resp, err
	}
}
