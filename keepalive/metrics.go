package keepalive

import (
	"github.com/forever-agents/forever/internal/promreg"
	"github.com/prometheus/client_golang/prometheus"
)

// Outcome label values of forever_keepalive_schedules_fired_total.
const (
	outcomeOK     = "ok"     // callback succeeded
	outcomeRetry  = "retry"  // callback failed, a retry is scheduled
	outcomeFailed = "failed" // callback failed MaxAttempts times, given up
)

// poolMetrics are a Pool's metrics. No agent labels: refs is the total over
// all agents.
type poolMetrics struct {
	refs       prometheus.Gauge
	heartbeats *prometheus.CounterVec
}

func newPoolMetrics(reg prometheus.Registerer) (*poolMetrics, error) {
	var m poolMetrics
	var err error
	if m.refs, err = promreg.Register(reg, prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "forever_keepalive_refs",
		Help: "Keep-alive references held, summed over all agents.",
	})); err != nil {
		return nil, err
	}
	if m.heartbeats, err = promreg.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "forever_keepalive_heartbeats_total",
		Help: "Heartbeats run while keep-alive references were held, by outcome (ok, error, hung).",
	}, []string{"outcome"})); err != nil {
		return nil, err
	}
	return &m, nil
}

// schedulerMetrics are a Scheduler's metrics.
type schedulerMetrics struct {
	fired *prometheus.CounterVec
	delay prometheus.Histogram
	hung  prometheus.Counter
}

func newSchedulerMetrics(reg prometheus.Registerer) (*schedulerMetrics, error) {
	var m schedulerMetrics
	var err error
	if m.fired, err = promreg.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "forever_keepalive_schedules_fired_total",
		Help: "Schedule callbacks run, by outcome (ok, retry, failed).",
	}, []string{"outcome"})); err != nil {
		return nil, err
	}
	if m.delay, err = promreg.Register(reg, prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "forever_keepalive_schedule_delay_seconds",
		Help:    "Time from a schedule's due time to the start of its callback.",
		Buckets: prometheus.ExponentialBuckets(0.001, 4, 12),
	})); err != nil {
		return nil, err
	}
	if m.hung, err = promreg.Register(reg, prometheus.NewCounter(prometheus.CounterOpts{
		Name: "forever_keepalive_callbacks_hung_total",
		Help: "Schedule callbacks abandoned because they ran longer than the callback timeout.",
	})); err != nil {
		return nil, err
	}
	return &m, nil
}
