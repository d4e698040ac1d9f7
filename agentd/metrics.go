package agentd

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// newRegistry returns a registry with the Go runtime and process collectors,
// for a Config without Registerer.
func newRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return reg
}

// registerMetrics registers the daemon's gauges, computed at scrape time.
func (d *Daemon) registerMetrics(reg prometheus.Registerer) error {
	ready := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "forever_agentd_ready",
		Help: "1 when the daemon is ready (/readyz answers 200), else 0.",
	}, func() float64 {
		if _, ok := d.readiness(); ok {
			return 1
		}
		return 0
	})
	connected := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "forever_agentd_nats_connected",
		Help: "1 while the daemon's NATS connection is up, else 0.",
	}, func() float64 {
		if _, ok := d.natsStatus(); ok {
			return 1
		}
		return 0
	})
	for _, c := range []prometheus.Collector{ready, connected} {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("%w: register metrics: %w", ErrConfig, err)
		}
	}
	return nil
}
