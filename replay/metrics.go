package replay

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics of the gateway. Labels: transport is "sse" or "ws".
type metrics struct {
	followers *prometheus.GaugeVec
	chunks    *prometheus.CounterVec
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
	}
	if reg == nil {
		return m, nil
	}
	// A second gateway on the same registry shares the first one's series.
	if err := reg.Register(m.followers); err != nil {
		var are prometheus.AlreadyRegisteredError
		if !errors.As(err, &are) {
			return nil, err
		}
		m.followers = are.ExistingCollector.(*prometheus.GaugeVec)
	}
	if err := reg.Register(m.chunks); err != nil {
		var are prometheus.AlreadyRegisteredError
		if !errors.As(err, &are) {
			return nil, err
		}
		m.chunks = are.ExistingCollector.(*prometheus.CounterVec)
	}
	return m, nil
}
