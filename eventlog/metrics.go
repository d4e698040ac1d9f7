package eventlog

import (
	"time"

	"github.com/forever-agents/forever/internal/promreg"
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the package's Prometheus metrics. Labels are small fixed sets:
// the JetStream stream name, the append mode and the projection name.
type metrics struct {
	appended       *prometheus.CounterVec
	appendSeconds  *prometheus.HistogramVec
	lag            *prometheus.GaugeVec
	cursor         *prometheus.GaugeVec
	applied        *prometheus.CounterVec
	corrupt        *prometheus.CounterVec
	ackRetries     prometheus.Counter
	leaderAsks     prometheus.Counter
	viewStalls     prometheus.Counter
	viewsStalled   prometheus.Gauge
	compactions    *prometheus.CounterVec
	compactSeconds prometheus.Histogram
	shardStarts    prometheus.Counter
	// consumerRenewals counts followers' consumers recreated for a
	// waiting recovery (Follower.renew) or a catch-up's (Follower.consume).
	consumerRenewals prometheus.Counter
	// consumersPlacedAgain counts views' consumers dropped and placed
	// again for a replica far behind (placement.go).
	consumersPlacedAgain prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		appended: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "forever_eventlog_events_appended_total",
			Help: "Events acknowledged by JetStream, by stream.",
		}, []string{"stream"}),
		appendSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "forever_eventlog_append_seconds",
			Help:    "Time from publish to acknowledgement of one append or one atomic batch.",
			Buckets: prometheus.ExponentialBuckets(0.00005, 2, 16),
		}, []string{"stream", "mode"}),
		lag: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "forever_eventlog_projection_lag_events",
			Help: "Events stored but not yet applied to the projection, per stream (shard) it follows; a shard's series goes when its follower stops.",
		}, []string{"projection", "stream"}),
		cursor: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "forever_eventlog_projection_cursor",
			Help: "Last stream sequence applied to the projection.",
		}, []string{"projection"}),
		applied: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "forever_eventlog_projection_events_applied_total",
			Help: "Events applied to the projection (those its filter and, with owned views, its followed partitions select).",
		}, []string{"projection"}),
		corrupt: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "forever_eventlog_corrupt_events_total",
			Help: "Stored events a projection skipped because they could not be decoded.",
		}, []string{"projection"}),
		ackRetries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "forever_eventlog_ack_retries_total",
			Help: "Publishes sent again with the same message id because their acknowledgement did not come within the ack timeout, or their stream elected a leader while it was awaited.",
		}),
		leaderAsks: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "forever_eventlog_leader_asks_retried_total",
			Help: "Requests to a stream's leader (the last sequence a fenced append expects, a stream's info, among others) sent again beside the ones in flight because no server answered within 1 s: the leader was lost and its followers had not noticed yet, or it was slow.",
		}),
		viewStalls: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "forever_eventlog_view_stalls_total",
			Help: "Times Pebble failed a projection write (a full or failing disk) and the projections stalled until it wrote again.",
		}),
		viewsStalled: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "forever_eventlog_views_stalled",
			Help: "1 while the projections cannot write to Pebble, else 0.",
		}),
		compactions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "forever_eventlog_compactions_total",
			Help: "Agent compactions (Log.Compact), by result: ok, nothing (no event since the last snapshot), conflict (the agent wrote meanwhile), error.",
		}, []string{"result"}),
		compactSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "forever_eventlog_compaction_seconds",
			Help:    "Time of one successful compaction: wait for the views, snapshot append, purge.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}),
		shardStarts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "forever_eventlog_shard_follower_starts_total",
			Help: "Starts of a shard follower's consumer from its stored cursors: every shard's when the views start, and with owned views each shard's whose followed partitions changed.",
		}),
		consumerRenewals: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "forever_eventlog_view_consumer_renewals_total",
			Help: "Consumers of the views recreated because they delivered nothing for 2 s while events were stored: an owned-views shard follower's that a partition's recovery waited on, or any catch-up's (a consumer on a dead server, placed where its stream elects, or on a replica still catching up).",
		}),
		consumersPlacedAgain: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "forever_eventlog_view_consumers_placed_again_total",
			Help: "Consumers of the views dropped beside their first deliveries and placed again, because JetStream placed them on a replica of their stream that was offline or far behind its leader (a node restarted a moment ago): up to 3 times a shard follower's consumer.",
		}),
	}
	if reg == nil {
		return m, nil
	}
	// Several Logs may share one registry (tests, a program hosting two):
	// they then share the collectors already registered.
	var err error
	if m.appended, err = promreg.Register(reg, m.appended); err != nil {
		return nil, err
	}
	if m.appendSeconds, err = promreg.Register(reg, m.appendSeconds); err != nil {
		return nil, err
	}
	if m.lag, err = promreg.Register(reg, m.lag); err != nil {
		return nil, err
	}
	if m.cursor, err = promreg.Register(reg, m.cursor); err != nil {
		return nil, err
	}
	if m.applied, err = promreg.Register(reg, m.applied); err != nil {
		return nil, err
	}
	if m.corrupt, err = promreg.Register(reg, m.corrupt); err != nil {
		return nil, err
	}
	if m.ackRetries, err = promreg.Register(reg, m.ackRetries); err != nil {
		return nil, err
	}
	if m.leaderAsks, err = promreg.Register(reg, m.leaderAsks); err != nil {
		return nil, err
	}
	if m.viewStalls, err = promreg.Register(reg, m.viewStalls); err != nil {
		return nil, err
	}
	if m.viewsStalled, err = promreg.Register(reg, m.viewsStalled); err != nil {
		return nil, err
	}
	if m.compactions, err = promreg.Register(reg, m.compactions); err != nil {
		return nil, err
	}
	if m.compactSeconds, err = promreg.Register(reg, m.compactSeconds); err != nil {
		return nil, err
	}
	if m.shardStarts, err = promreg.Register(reg, m.shardStarts); err != nil {
		return nil, err
	}
	if m.consumerRenewals, err = promreg.Register(reg, m.consumerRenewals); err != nil {
		return nil, err
	}
	if m.consumersPlacedAgain, err = promreg.Register(reg, m.consumersPlacedAgain); err != nil {
		return nil, err
	}
	return m, nil
}

func (m *metrics) observeAppend(stream, mode string, n int, d time.Duration) {
	m.appended.WithLabelValues(stream).Add(float64(n))
	m.appendSeconds.WithLabelValues(stream, mode).Observe(d.Seconds())
}
