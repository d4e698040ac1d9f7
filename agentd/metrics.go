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
	cs := []prometheus.Collector{ready, connected}
	if d.tenants != nil {
		d.metrics.authRefused = prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "forever_auth_refused_total",
			Help: "HTTP requests refused, by reason: missing or invalid (or revoked) bearer token (401), or an OIDC token naming a tenant that does not exist (403).",
		}, []string{"reason"})
		tenants := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "forever_tenants_running",
			Help: "Tenant daemons running on this node.",
		}, func() float64 { return float64(d.tenants.running()) })
		cs = append(cs, d.metrics.authRefused, tenants)
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("%w: register metrics: %w", ErrConfig, err)
		}
	}
	return nil
}
