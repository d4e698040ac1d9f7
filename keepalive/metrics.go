package keepalive

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// Outcome label values of forever_keepalive_schedules_fired_total.
const (
	outcomeOK     = "ok"     // callback succeeded
	outcomeRetry  = "retry"  // callback failed, a retry is scheduled
	outcomeFailed = "failed" // callback failed MaxAttempts times, given up
)

// register registers c on reg, or returns the collector already registered
// under the same description, so that several Pools or Schedulers may share a
// registry.
func register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	if reg == nil {
		return c, nil
	}
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing, nil
			}
		}
		return c, err
	}
	return c, nil
}

// poolMetrics are a Pool's metrics. No agent labels: refs is the total over
// all agents.
type poolMetrics struct {
	refs       prometheus.Gauge
	heartbeats *prometheus.CounterVec
}

func newPoolMetrics(reg prometheus.Registerer) (*poolMetrics, error) {
	var m poolMetrics
	var err error
	if m.refs, err = register(reg, prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "forever_keepalive_refs",
		Help: "Keep-alive references held, summed over all agents.",
	})); err != nil {
		return nil, err
	}
	if m.heartbeats, err = register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "forever_keepalive_heartbeats_total",
		Help: "Heartbeats run while keep-alive references were held, by outcome (ok, error).",
	}, []string{"outcome"})); err != nil {
		return nil, err
	}
	return &m, nil
}

// schedulerMetrics are a Scheduler's metrics.
type schedulerMetrics struct {
	fired *prometheus.CounterVec
	delay prometheus.Histogram
}

func newSchedulerMetrics(reg prometheus.Registerer) (*schedulerMetrics, error) {
	var m schedulerMetrics
	var err error
	if m.fired, err = register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "forever_keepalive_schedules_fired_total",
		Help: "Schedule callbacks run, by outcome (ok, retry, failed).",
	}, []string{"outcome"})); err != nil {
		return nil, err
	}
	if m.delay, err = register(reg, prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "forever_keepalive_schedule_delay_seconds",
		Help:    "Time from a schedule's due time to the start of its callback.",
		Buckets: prometheus.ExponentialBuckets(0.001, 4, 12),
	})); err != nil {
		return nil, err
	}
	return &m, nil
}
