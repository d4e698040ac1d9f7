package ownership

import (
	"github.com/forever-agents/forever/internal/promreg"
	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	nodes    prometheus.Gauge
	acquired prometheus.Counter
	renewals prometheus.Counter
	lost     *prometheus.CounterVec
	handoff  prometheus.Histogram
}

func newMetrics(reg prometheus.Registerer, m *Manager) (*metrics, error) {
	out := &metrics{
		nodes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "forever_ownership_nodes", Help: "Live nodes this node sees in the lease bucket.",
		}),
		acquired: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "forever_ownership_acquired_total", Help: "Partition leases this node acquired.",
		}),
		renewals: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "forever_ownership_renewals_total", Help: "Partition lease renewals that succeeded.",
		}),
		lost: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "forever_ownership_lost_total",
			Help: "Partition leases this node lost without handing them off, by cause (expired, conflict).",
		}, []string{"cause"}),
		handoff: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "forever_ownership_handoff_seconds",
			Help:    "Time from a handoff's start to its lease key deleted.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 10),
		}),
	}
	owned := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "forever_ownership_partitions_owned", Help: "Partitions this node holds the lease of.",
	}, func() float64 { return float64(m.OwnedCount()) })
	for _, c := range []prometheus.Collector{out.nodes, out.acquired, out.renewals, out.lost, out.handoff, owned} {
		if _, err := promreg.Register(reg, c); err != nil {
			return nil, err
		}
	}
	return out, nil
}
