package agentd

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"

	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/replay"
	"github.com/forever-agents/forever/tracing"
	"github.com/nats-io/nats-server/v2/server"
)

// Health is the JSON body of /healthz and /readyz.
type Health struct {
	// Status is "ok" (healthz), "ready", "starting", "stopping" or
	// "unavailable".
	Status string `json:"status"`
	// NATS is the connection status: "connected", "reconnecting", ...
	NATS string `json:"nats"`
	// Projections maps each registered projection to whether it caught up.
	Projections map[string]bool `json:"projections,omitempty"`
	// Partitions is how many agent partitions this node owns (readyz).
	Partitions int `json:"partitions"`
	// JetStream is the embedded clustered server's health (readyz): "ok"
	// once its replicas of every stream and consumer are current, so a
	// rolling restart waits for it before stopping the next node.
	JetStream string `json:"jetstream,omitempty"`
}

// natsStatus returns the connection's status, "none" before it exists.
func (d *Daemon) natsStatus() (string, bool) {
	d.mu.Lock()
	nc := d.mu.nc
	d.mu.Unlock()
	if nc == nil {
		return "none", false
	}
	return strings.ToLower(nc.Status().String()), nc.IsConnected()
}

// handleHealthz answers 200 while the NATS connection is up, 503 otherwise.
func (d *Daemon) handleHealthz(w http.ResponseWriter, _ *http.Request) {
	status, ok := d.natsStatus()
	h := Health{Status: "ok", NATS: status}
	code := http.StatusOK
	if !ok {
		h.Status, code = "unavailable", http.StatusServiceUnavailable
	}
	writeJSON(w, code, h)
}

// handleReadyz answers 200 once the daemon started, NATS is connected and
// every registered projection caught up; 503 otherwise and while stopping.
func (d *Daemon) handleReadyz(w http.ResponseWriter, _ *http.Request) {
	h, ok := d.readiness()
	code := http.StatusOK
	if !ok {
		code = http.StatusServiceUnavailable
	}
	writeJSON(w, code, h)
}

// readiness reports what /readyz shows and whether the daemon is ready.
func (d *Daemon) readiness() (Health, bool) {
	status, connected := d.natsStatus()
	h := Health{Status: "ready", NATS: status, Projections: map[string]bool{}}
	d.mu.Lock()
	started := d.mu.started
	prs := d.mu.projectors
	readies := d.mu.readies
	srv := d.mu.srv
	d.mu.Unlock()
	ready := started && connected
	for _, pr := range prs {
		select {
		case <-pr.Ready():
			h.Projections[pr.Name()] = true
		default:
			h.Projections[pr.Name()] = false
			ready = false
		}
	}
	if srv != nil && d.cfg.clustered() {
		hs := srv.Healthz(&server.HealthzOptions{})
		h.JetStream = hs.Status
		if hs.Error != "" {
			h.JetStream = hs.Error
		}
		if hs.StatusCode != http.StatusOK {
			ready = false
		}
	}
	if mgr := d.parts.ready.Load(); mgr != nil {
		select {
		case <-mgr.Ready():
			h.Partitions = mgr.OwnedCount()
		default:
			ready = false
		}
	}
	for _, r := range readies {
		select {
		case <-r.ready:
			h.Projections[r.name] = true
		default:
			h.Projections[r.name] = false
			ready = false
		}
	}
	select {
	case <-d.stopping:
		h.Status, ready = "stopping", false
	default:
		switch {
		case !started:
			h.Status = "starting"
		case !connected:
			h.Status = "unavailable"
		case !ready:
			h.Status = "starting"
		}
	}
	return h, ready
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// handleQuarantine lists the stored events the views skipped as corrupt
// (eventlog.Log.Quarantine): 200 with a JSON array, oldest first per
// stream; 503 before the daemon started.
func (d *Daemon) handleQuarantine(w http.ResponseWriter, _ *http.Request) {
	d.mu.Lock()
	lg := d.mu.lg
	d.mu.Unlock()
	if lg == nil {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": "agentd: not started"})
		return
	}
	out := []eventlog.Quarantined{}
	for q, err := range lg.Quarantine() {
		if err != nil {
			code := http.StatusInternalServerError
			if eventlog.Unavailable(err) {
				code = http.StatusServiceUnavailable
			}
			writeJSON(w, code, map[string]string{"error": err.Error()})
			return
		}
		out = append(out, q)
	}
	writeJSON(w, http.StatusOK, out)
}

// webServer is agentd's HTTP server, serving from the start of Run.
type webServer struct {
	hs     *http.Server
	addr   string
	cancel context.CancelFunc // ends the requests' context
	served chan error         // Serve's error
}

// startingHandler serves while Run starts: /healthz and /metrics as always
// (healthz 200 once the NATS connection is up), and 503 with Retry-After
// for everything else, /readyz included, with {"status":"starting"}.
func (d *Daemon) startingHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", d.handleHealthz)
	mux.Handle("GET /metrics", d.metricsHandler)
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Retry-After", "1")
		writeJSON(w, http.StatusServiceUnavailable, Health{Status: "starting"})
	})
	return mux
}

// frontDoor is what the HTTP server serves once started: /healthz and
// /readyz for any Host (probes address a pod by its IP), and everything
// else behind the Host check (without auth, or with --allowed-host) and,
// with auth and --cors-origin, behind CORS, which answers a browser's
// preflight before the bearer token is asked for.
func (d *Daemon) frontDoor() http.Handler {
	var h http.Handler = d.mux
	cfg := &d.cfg
	if cfg.Auth && len(cfg.CORSOrigins) > 0 {
		h = replay.CORS(cfg.CORSOrigins, h)
	}
	if !cfg.Auth || len(cfg.AllowedHosts) > 0 {
		hosts, _ := replay.ParseHostPatterns(cfg.AllowedHosts) // Validate parsed them
		h = replay.HostCheck(hosts, h)
	}
	// With tracing, requests under /v1/ get a server span (the child of
	// their traceparent) and their responses Forever-Trace-Id.
	h = tracing.Handler(tracing.New(cfg.TracerProvider, "agentd"), h)
	front := http.NewServeMux()
	front.HandleFunc("GET /healthz", d.handleHealthz)
	front.HandleFunc("GET /readyz", d.handleReadyz)
	front.Handle("/", h)
	return front
}
