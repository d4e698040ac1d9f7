package modellimit

import "github.com/prometheus/client_golang/prometheus"

// metrics are the limiter's forever_model_limiter_* metrics. Labels:
// tenant (the tenants of the node, a set the operator made) and model
// (the provider and model, one or a few per node).
type metrics struct {
	granted   *prometheus.CounterVec
	tokens    *prometheus.CounterVec
	waiting   *prometheus.GaugeVec
	wait      *prometheus.HistogramVec
	throttled *prometheus.CounterVec
	paused    *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		granted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "forever_model_limiter_granted_total",
			Help: "Model calls the limiter let start, by tenant.",
		}, []string{"tenant"}),
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "forever_model_limiter_tokens_total",
			Help: "Tokens (input and output) of the model calls the limiter let start, by tenant.",
		}, []string{"tenant"}),
		waiting: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "forever_model_limiter_waiting",
			Help: "Model calls waiting for the limiter now, by tenant.",
		}, []string{"tenant"}),
		wait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "forever_model_limiter_wait_seconds",
			Help:    "How long model calls waited for the limiter, by tenant.",
			Buckets: []float64{0.001, 0.01, 0.1, 0.5, 1, 2, 5, 10, 30, 60, 300},
		}, []string{"tenant"}),
		throttled: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "forever_model_limiter_throttled_total",
			Help: "Provider answers that said rate limited or overloaded (429, 503, 529), by model: each paused the model's calls for every tenant.",
		}, []string{"model"}),
		paused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "forever_model_limiter_paused_seconds_total",
			Help: "Seconds the limiter held a model's calls back after a provider's rate-limited answer (Retry-After, or backoff without one), by model.",
		}, []string{"model"}),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.granted, m.tokens, m.waiting, m.wait, m.throttled, m.paused} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}
