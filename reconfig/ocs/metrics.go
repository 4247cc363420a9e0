package ocs

import (
	"time"

	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
	"github.com/prometheus/client_golang/prometheus"
)

// Metric names registered by a Server with a ServerConfig.Registry. The
// gRPC server metrics of the go-grpc-middleware Prometheus provider
// (grpc_server_started_total, grpc_server_handled_total with grpc_service,
// grpc_method and grpc_code labels, grpc_server_handling_seconds, ...) are
// registered as well.
const (
	MetricApplySeconds      = "occl_ocsd_apply_seconds"
	MetricSwitchingSeconds  = "occl_ocsd_switching_seconds"
	MetricStateWriteSeconds = "occl_ocsd_state_write_seconds"
	MetricCircuitsInstalled = "occl_ocsd_circuits_installed"
	MetricPortsFailed       = "occl_ocsd_ports_failed"
	MetricPortsDrained      = "occl_ocsd_ports_drained"
	MetricGeneration        = "occl_ocsd_generation"
)

// serverMetrics are a controller's Prometheus metrics; nil when the
// controller has no registry, and every method is then a no-op.
type serverMetrics struct {
	apply      prometheus.Histogram
	switching  prometheus.Histogram
	stateWrite prometheus.Histogram
	grpc       *grpcprom.ServerMetrics
}

// newServerMetrics registers s's metrics with reg.
func newServerMetrics(s *Server, reg prometheus.Registerer) (*serverMetrics, error) {
	m := &serverMetrics{
		apply: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    MetricApplySeconds,
			Help:    "Latency of Apply calls that reached the switch logic (validated request id), from the request to the answer, including waiting for a change in progress.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}),
		switching: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    MetricSwitchingSeconds,
			Help:    "Time the switch took to make one change of its cross-connects (successful or not, rollbacks excluded).",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}),
		stateWrite: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    MetricStateWriteSeconds,
			Help:    "Latency of writing the state file (temporary file, fsync, rename, fsync of the directory).",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16),
		}),
		grpc: grpcprom.NewServerMetrics(grpcprom.WithServerHandlingTimeHistogram()),
	}
	locked := func(f func() float64) func() float64 {
		return func() float64 {
			s.mu.Lock()
			defer s.mu.Unlock()
			return f()
		}
	}
	count := func(xs []bool) float64 {
		n := 0
		for _, x := range xs {
			if x {
				n++
			}
		}
		return float64(n)
	}
	cs := []prometheus.Collector{
		m.apply, m.switching, m.stateWrite, m.grpc,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: MetricCircuitsInstalled,
			Help: "Cross-connects the controller has installed (committed).",
		}, locked(func() float64 { return float64(len(s.dur.Connects)) })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: MetricPortsFailed,
			Help: "Ports the switch reported failed when last read.",
		}, locked(func() float64 { return count(s.failed) })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: MetricPortsDrained,
			Help: "Ports drained by an operator.",
		}, locked(func() float64 { return count(s.drained) })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: MetricGeneration,
			Help: "Generation of the installed set of cross-connects.",
		}, locked(func() float64 { return float64(s.dur.Generation) })),
	}
	for i, c := range cs {
		if err := reg.Register(c); err != nil {
			// Take back what was registered, so that the registry is as it
			// was and a retry can succeed.
			for _, r := range cs[:i] {
				reg.Unregister(r)
			}
			return nil, err
		}
	}
	return m, nil
}

func (m *serverMetrics) observeApply(start time.Time) {
	if m != nil {
		m.apply.Observe(time.Since(start).Seconds())
	}
}

func (m *serverMetrics) observeSwitching(d time.Duration) {
	if m != nil {
		m.switching.Observe(d.Seconds())
	}
}

func (m *serverMetrics) observeStateWrite(start time.Time) {
	if m != nil {
		m.stateWrite.Observe(time.Since(start).Seconds())
	}
}
