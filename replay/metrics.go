package replay

import (
	"github.com/forever-agents/forever/internal/promreg"
	"github.com/prometheus/client_golang/prometheus"
)

// metrics of the gateway. Labels: transport is "sse" or "ws".
type metrics struct {
	followers *prometheus.GaugeVec
	chunks    *prometheus.CounterVec
	slow      prometheus.Counter
	// refusedOrigins counts browser requests from origins not allowed.
	refusedOrigins prometheus.Counter
	// lostPayloads counts chunks skipped because the payload they hold
	// by reference could not be read back.
	lostPayloads prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		followers: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "forever_replay_followers",
			Help: "Responses currently following a chat stream, by transport.",
		}, []string{"transport"}),
		chunks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "forever_replay_chunks_sent_total",
			Help: "Chunks sent to gateway clients, replayed or live, by transport.",
		}, []string{"transport"}),
		slow: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "forever_replay_slow_clients_total",
			Help: "Streaming clients disconnected for not reading within the write timeout (they resume from their cursor).",
		}),
		refusedOrigins: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "forever_replay_refused_origins_total",
			Help: "Browser requests (HTTP and WebSocket) refused with 403 because their Origin is not allowed.",
		}),
		lostPayloads: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "forever_replay_lost_payloads_total",
			Help: "Chunks not sent to gateway clients because the payload they hold by reference is missing from, or does not match, the blob store.",
		}),
	}
	if reg == nil {
		return m, nil
	}
	// A second gateway on the same registry shares the first one's series.
	var err error
	if m.followers, err = promreg.Register(reg, m.followers); err != nil {
		return nil, err
	}
	if m.chunks, err = promreg.Register(reg, m.chunks); err != nil {
		return nil, err
	}
	if m.slow, err = promreg.Register(reg, m.slow); err != nil {
		return nil, err
	}
	if m.refusedOrigins, err = promreg.Register(reg, m.refusedOrigins); err != nil {
		return nil, err
	}
	if m.lostPayloads, err = promreg.Register(reg, m.lostPayloads); err != nil {
		return nil, err
	}
	return m, nil
}
