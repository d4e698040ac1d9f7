package agentd

import (
	"fmt"
	"strings"

	"github.com/nats-io/nats-server/v2/server"

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
	for _, c := range []prometheus.Collector{ready, connected, &healthCollector{d: d}} {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("%w: register metrics: %w", ErrConfig, err)
		}
	}
	return nil
}

// healthCollector exports, at scrape time, the readiness reasons and
// degradations /readyz reports, and the embedded server's JetStream usage.
type healthCollector struct{ d *Daemon }

var (
	descReadyReason = prometheus.NewDesc("forever_agentd_ready_reason",
		"1 while this reason keeps /readyz at 503 (the reasons list names the stream, bucket, view or limit), else 0.",
		[]string{"reason"}, nil)
	descDegraded = prometheus.NewDesc("forever_agentd_degraded",
		"1 while the node serves degraded (/readyz 200 with this cause under degraded), else 0.",
		[]string{"reason"}, nil)
	descStore = prometheus.NewDesc("forever_jetstream_store_bytes",
		"Bytes the embedded server's JetStream file store holds (every stream, every account).", nil, nil)
	descStoreMax = prometheus.NewDesc("forever_jetstream_store_max_bytes",
		"The embedded server's JetStream file store limit (--js-max-store).", nil, nil)
	descMem = prometheus.NewDesc("forever_jetstream_memory_bytes",
		"Bytes the embedded server's JetStream memory store holds (the lease buckets live there).", nil, nil)
	descMemMax = prometheus.NewDesc("forever_jetstream_memory_max_bytes",
		"The embedded server's JetStream memory store limit (--js-max-memory).", nil, nil)
	descTLSNotAfter = prometheus.NewDesc("forever_agentd_tls_cert_not_after_seconds",
		"When the TLS certificate (--tls-cert) in use expires, in Unix seconds: alert well before it.", nil, nil)
	descMetaLeader = prometheus.NewDesc("forever_jetstream_meta_leader",
		"1 while the embedded server's JetStream meta group has a leader (a clustered server has quorum; always 1 alone), else 0.", nil, nil)
)

func (c *healthCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descReadyReason, descDegraded, descStore, descStoreMax, descMem, descMemMax, descMetaLeader, descTLSNotAfter} {
		ch <- d
	}
}

func (c *healthCollector) Collect(ch chan<- prometheus.Metric) {
	h, codes := c.d.readinessReasons()
	for _, r := range readyReasons {
		v := 0.0
		if codes[r] {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(descReadyReason, prometheus.GaugeValue, v, r)
	}
	full, expired := 0.0, 0.0
	for _, r := range h.Degraded {
		switch {
		case strings.HasPrefix(r, "JetStream store full"):
			full = 1
		case strings.HasPrefix(r, "TLS certificate"):
			expired = 1
		}
	}
	ch <- prometheus.MustNewConstMetric(descDegraded, prometheus.GaugeValue, full, DegradedStoreFull)
	ch <- prometheus.MustNewConstMetric(descDegraded, prometheus.GaugeValue, expired, DegradedTLSExpired)
	if tc := c.d.certs.Load(); tc != nil {
		if na := tc.notAfter(); !na.IsZero() {
			ch <- prometheus.MustNewConstMetric(descTLSNotAfter, prometheus.GaugeValue, float64(na.Unix()))
		}
	}
	if u, ok := c.d.storeUsage(); ok {
		ch <- prometheus.MustNewConstMetric(descStore, prometheus.GaugeValue, float64(u.store))
		ch <- prometheus.MustNewConstMetric(descStoreMax, prometheus.GaugeValue, float64(u.storeMax))
		ch <- prometheus.MustNewConstMetric(descMem, prometheus.GaugeValue, float64(u.mem))
		ch <- prometheus.MustNewConstMetric(descMemMax, prometheus.GaugeValue, float64(u.memMax))
		leader := 0.0
		if u.metaLeader {
			leader = 1
		}
		ch <- prometheus.MustNewConstMetric(descMetaLeader, prometheus.GaugeValue, leader)
	}
}

// jsUsage is the embedded server's JetStream usage and limits.
type jsUsage struct {
	store, storeMax, mem, memMax int64
	metaLeader                   bool
}

// storeUsage reads the embedded server's JetStream usage in process; false
// without an embedded server (--nats-url, a tenant's daemon).
func (d *Daemon) storeUsage() (jsUsage, bool) {
	d.mu.Lock()
	srv := d.mu.srv
	d.mu.Unlock()
	if srv == nil || d.cfg.Tenant != nil {
		return jsUsage{}, false
	}
	info, err := srv.Jsz(&server.JSzOptions{})
	if err != nil || info.Disabled {
		return jsUsage{}, false
	}
	u := jsUsage{store: int64(info.Store), storeMax: info.Config.MaxStore, mem: int64(info.Memory), memMax: info.Config.MaxMemory}
	u.metaLeader = info.Meta == nil || info.Meta.Leader != ""
	return u, true
}
