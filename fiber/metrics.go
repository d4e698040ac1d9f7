package fiber

import (
	"github.com/forever-agents/forever/internal/promreg"
	"github.com/prometheus/client_golang/prometheus"
)

// Outcomes of forever_fiber_completed_total.
const (
	outcomeCompleted   = "completed"   // fiber.completed appended
	outcomeFailed      = "failed"      // fiber.failed appended
	outcomeInterrupted = "interrupted" // Runner closed under it: row left for recovery
	outcomeAbandoned   = "abandoned"   // fiber.abandoned appended by Recover
)

// metrics are the package's Prometheus metrics. Runners sharing a
// Registerer share the collectors.
type metrics struct {
	started      prometheus.Counter
	completed    *prometheus.CounterVec
	recovered    prometheus.Counter
	stashSeconds prometheus.Histogram
	// appendRetries counts appends sent again after JetStream refused them
	// while electing a leader.
	appendRetries prometheus.Counter
	// versioned counts recoveries of fibers that last ran under another
	// version, by the policy applied: continue, restart, fail.
	versioned *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		started: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "forever_fiber_started_total",
			Help: "Fibers started (fiber.started appended).",
		}),
		completed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "forever_fiber_completed_total",
			Help: "Fiber runs ended, by outcome: completed, failed, interrupted (runner closed, left for recovery), abandoned.",
		}, []string{"outcome"}),
		recovered: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "forever_fiber_recovered_total",
			Help: "Recovery attempts (fiber.recovered appended).",
		}),
		stashSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "forever_fiber_stash_seconds",
			Help:    "Time for a stash to become durable (fiber.stashed acknowledged).",
			Buckets: prometheus.ExponentialBuckets(0.00005, 2, 16),
		}),
		appendRetries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "forever_fiber_append_retries_total",
			Help: "Fiber events sent again after JetStream refused them unwritten (a stream electing its leader).",
		}),
		versioned: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "forever_fiber_version_recoveries_total",
			Help: "Recoveries of fibers that last ran under another version of their agent type's code, by the version policy applied (continue, restart, fail).",
		}, []string{"policy"}),
	}
	if reg == nil {
		return m, nil
	}
	var err error
	if m.started, err = promreg.Register(reg, m.started); err != nil {
		return nil, err
	}
	if m.completed, err = promreg.Register(reg, m.completed); err != nil {
		return nil, err
	}
	// Every outcome from 0, so increase() counts a first abandon.
	for _, o := range []string{outcomeCompleted, outcomeFailed, outcomeInterrupted, outcomeAbandoned} {
		m.completed.WithLabelValues(o)
	}
	if m.recovered, err = promreg.Register(reg, m.recovered); err != nil {
		return nil, err
	}
	if m.stashSeconds, err = promreg.Register(reg, m.stashSeconds); err != nil {
		return nil, err
	}
	if m.appendRetries, err = promreg.Register(reg, m.appendRetries); err != nil {
		return nil, err
	}
	if m.versioned, err = promreg.Register(reg, m.versioned); err != nil {
		return nil, err
	}
	for _, p := range []VersionPolicy{VersionContinue, VersionRestart, VersionFail} {
		m.versioned.WithLabelValues(string(p))
	}
	return m, nil
}
