package agentd

import (
	"errors"
	"flag"
	"net"
	"net/http"
	"net/http/pprof"
	"net/netip"
)

// DefaultAuthMetricsListen is where /metrics is served under --auth when
// --metrics-listen is not set: loopback only, away from the tenants' port.
const DefaultAuthMetricsListen = "127.0.0.1:9464"

// maxMetricsConns bounds the connections of the metrics listener.
const maxMetricsConns = 64

// metricsAddr is where /metrics is served: MetricsListen when set; under
// Auth DefaultAuthMetricsListen (its series name every tenant, so it is
// not on the tenants' port); else "" for the --http port. A tenant's
// daemon serves none.
func (c *Config) metricsAddr() string {
	switch {
	case c.Tenant != nil:
		return ""
	case c.MetricsListen != "":
		return c.MetricsListen
	case c.Auth:
		return DefaultAuthMetricsListen
	}
	return ""
}

// validateMetrics checks --metrics-listen and --pprof.
func (c *Config) validateMetrics() error {
	if c.Pprof && c.metricsAddr() == "" {
		return configErrorf("pprof", "--pprof serves on the metrics listener: set --metrics-listen too")
	}
	if c.MetricsListen == "" {
		return nil
	}
	if _, _, err := splitAddr(c.MetricsListen); err != nil {
		return configErrorf("metrics-listen", "metrics listen address %q: %v", c.MetricsListen, err)
	}
	return nil
}

// metricsFlags defines --metrics-listen and --pprof.
func metricsFlags(fs *flag.FlagSet, cfg *Config) {
	fs.StringVar(&cfg.MetricsListen, "metrics-listen", cfg.MetricsListen,
		"`host:port` serving /metrics on a listener of its own, and no longer on --http (default with --auth: "+
			DefaultAuthMetricsListen+"; without: /metrics on --http); plain HTTP, keep it on loopback or a private network; "+
			"it answers a Host that is loopback, an IP address or an --allowed-host, others get 403 (DNS rebinding)")
	fs.BoolVar(&cfg.Pprof, "pprof", cfg.Pprof,
		"also serve Go's profiles under /debug/pprof/ on the --metrics-listen listener (for example /debug/pprof/profile?seconds=30, a CPU profile); needs --metrics-listen or --auth")
}

// serveMetrics serves /metrics on Config.metricsAddr when it is set, until
// the returned stop is called. Errors: ErrAddrInUse or ErrConfig naming
// --metrics-listen.
func (d *Daemon) serveMetrics() (stop func(), err error) {
	addr := d.cfg.metricsAddr()
	if addr == "" {
		return func() {}, nil
	}
	ln, err := listen("metrics listen address", "metrics-listen", addr)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", d.metricsHandler)
	if d.cfg.Auth {
		mux.HandleFunc("GET /debug/quarantine", d.handleQuarantine)
	}
	if d.cfg.Pprof {
		mux.HandleFunc("GET /debug/pprof/", pprof.Index)
		mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	}
	hs := &http.Server{
		Handler:           d.cfg.metricsHostCheck(mux),
		ReadHeaderTimeout: d.cfg.HTTPReadHeaderTimeout,
		IdleTimeout:       d.cfg.HTTPIdleTimeout,
	}
	s := ln.Addr().String()
	d.metricsListen.Store(&s)
	lim := &connLimiter{Listener: ln, max: maxMetricsConns, refusing: make(chan struct{}, 1)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := hs.Serve(lim); !errors.Is(err, http.ErrServerClosed) {
			d.logger.Error("metrics listener stopped", "addr", s, "err", err)
		}
	}()
	return func() {
		hs.Close()
		<-done
	}, nil
}

// metricsHostCheck is --http's Host check (Config.hostCheck: loopback and
// --allowed-host) on the metrics listener, with or without --auth: it asks
// for no token, and its series name every tenant. A Host that is an IP
// address passes too: Prometheus scrapes a pod at its address, and a DNS
// rebinding page's requests carry the attacker's name, never an address.
func (c *Config) metricsHostCheck(h http.Handler) http.Handler {
	check := c.hostCheck(h)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if isAddrHost(r.Host) {
			h.ServeHTTP(w, r)
			return
		}
		check.ServeHTTP(w, r)
	})
}

// isAddrHost reports whether host, a Request.Host, is an IP address with
// an optional port.
func isAddrHost(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.Zone() == ""
}

// MetricsAddr returns the address /metrics is served on when it has a
// listener of its own (--metrics-listen, with its port picked when it was
// 0), empty when /metrics is on the HTTP port.
func (d *Daemon) MetricsAddr() string {
	if p := d.metricsListen.Load(); p != nil {
		return *p
	}
	return ""
}

// httpFront answers what the daemon's HTTP port refuses before any
// handler: /metrics when metrics have a listener of their own.
func (d *Daemon) httpFront(h http.Handler) http.Handler {
	if d.cfg.metricsAddr() == "" {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/metrics" {
			writeJSON(w, http.StatusNotFound, map[string]any{"code": http.StatusNotFound,
				"error": "metrics are served on the --metrics-listen address, not on --http"})
			return
		}
		h.ServeHTTP(w, r)
	})
}
