package ownership

import (
	"github.com/forever-agents/forever/internal/promreg"
	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	owned    prometheus.Gauge
	nodes    prometheus.Gauge
	acquired prometheus.Counter
	renewals prometheus.Counter
	lost     *prometheus.CounterVec
	handoff  prometheus.Histogram
	// handoffs counts handoffs by how their receiver was (warm.go).
	handoffs *prometheus.CounterVec
	// watchRestarts counts lease watches restarted for lagging this
	// node's own heartbeat.
	watchRestarts prometheus.Counter
	// slowFailovers counts stale takeovers more than TTL+5s after the
	// holder's last renewal.
	slowFailovers prometheus.Counter
	// graced counts leases served past their deadline on the election
	// grace (validLocked).
	graced prometheus.Counter
}

// newMetrics registers the package's metrics, or takes those already in
// reg (a Manager made again in the same process: a tenant's daemon
// restarted, a retried start).
func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	out := &metrics{
		owned: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "forever_ownership_partitions_owned", Help: "Partitions this node holds the lease of.",
		}),
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
		handoffs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "forever_ownership_handoffs_total",
			Help: "Partitions this node handed to the node they are assigned to, by how that node was: warm (its views had caught the partition up), waited (not warm after the warm wait), unannounced (a node that announces no warm partitions).",
		}, []string{"receiver"}),
		slowFailovers: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "forever_ownership_slow_failovers_total",
			Help: "Partitions this node took over from a node that stopped renewing them, more than the lease TTL and 5 s after that node's last renewal was seen.",
		}),
		graced: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "forever_ownership_election_grace_total",
			Help: "Partition leases this node served past their deadline while their renewals failed without a conflict (the lease bucket electing a leader) and were retried.",
		}),
		watchRestarts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "forever_ownership_watch_restarts_total",
			Help: "Lease bucket watches restarted because they lagged this node's acknowledged heartbeat (their server died).",
		}),
	}
	var err error
	if out.owned, err = promreg.Register(reg, out.owned); err != nil {
		return nil, err
	}
	if out.nodes, err = promreg.Register(reg, out.nodes); err != nil {
		return nil, err
	}
	if out.acquired, err = promreg.Register(reg, out.acquired); err != nil {
		return nil, err
	}
	if out.renewals, err = promreg.Register(reg, out.renewals); err != nil {
		return nil, err
	}
	if out.lost, err = promreg.Register(reg, out.lost); err != nil {
		return nil, err
	}
	if out.handoff, err = promreg.Register(reg, out.handoff); err != nil {
		return nil, err
	}
	if out.handoffs, err = promreg.Register(reg, out.handoffs); err != nil {
		return nil, err
	}
	if out.slowFailovers, err = promreg.Register(reg, out.slowFailovers); err != nil {
		return nil, err
	}
	if out.watchRestarts, err = promreg.Register(reg, out.watchRestarts); err != nil {
		return nil, err
	}
	if out.graced, err = promreg.Register(reg, out.graced); err != nil {
		return nil, err
	}
	out.owned.Set(0)
	// Every cause from 0, so increase() counts a first loss.
	for _, c := range []string{"expired", "conflict", "bucket", "other"} {
		out.lost.WithLabelValues(c)
	}
	for _, r := range []string{handoffWarm, handoffWaited, handoffUnannounced} {
		out.handoffs.WithLabelValues(r)
	}
	return out, nil
}
