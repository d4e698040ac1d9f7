package agentd

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"time"

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
	// Assigned is how many partitions the balanced assignment over the
	// live nodes gives this node (readyz).
	Assigned int `json:"assigned"`
	// JetStream is the embedded clustered server's health (readyz): "ok"
	// once its replicas of every stream and consumer are current, so a
	// rolling restart waits for it before stopping the next node.
	JetStream string `json:"jetstream,omitempty"`
	// Reasons says, one short sentence each, why the node cannot serve
	// commands now (readyz 503); empty when ready. Each names the stream,
	// bucket, view or limit involved.
	Reasons []string `json:"reasons,omitempty"`
	// Degraded lists what limits the node while it still serves (readyz
	// stays 200): a full store refuses writes but serves reads and replay.
	Degraded []string `json:"degraded,omitempty"`
}

// Readiness reasons, the label values of forever_agentd_ready_reason: a
// small fixed set, each one condition /readyz reports in its reasons.
const (
	ReasonStarting     = "starting"      // not started, or views not caught up yet
	ReasonStopping     = "stopping"      // shutting down
	ReasonNATS         = "nats"          // the NATS connection is down
	ReasonReplicas     = "replicas"      // clustered: JetStream replicas not current
	ReasonLeases       = "leases"        // the first round of leases is not taken
	ReasonPartitions   = "partitions"    // owns none of the partitions it is given
	ReasonStoreMissing = "store_missing" // a stream or bucket lost and not healed yet
	ReasonViewsStalled = "views_stalled" // Pebble cannot write, or views stopped following
)

// readyReasons are every readiness reason, for the metric.
var readyReasons = []string{ReasonStarting, ReasonStopping, ReasonNATS, ReasonReplicas, ReasonLeases,
	ReasonPartitions, ReasonStoreMissing, ReasonViewsStalled}

// Degradations, the label values of forever_agentd_degraded.
const (
	DegradedStoreFull  = "store_full"  // the JetStream store is full
	DegradedTLSExpired = "tls_expired" // the TLS certificate expired
)

// storeFullRecent is how long after JetStream last refused an append for
// want of space the store still counts as full.
const storeFullRecent = 10 * time.Second

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

// handleReadyz answers 200 once the daemon can serve commands, 503 with
// the reasons otherwise (see readiness).
func (d *Daemon) handleReadyz(w http.ResponseWriter, _ *http.Request) {
	h, ok := d.readiness()
	code := http.StatusOK
	if !ok {
		code = http.StatusServiceUnavailable
		w.Header().Set("Retry-After", "1")
	}
	writeJSON(w, code, h)
}

// readiness reports what /readyz shows and whether the daemon is ready:
// started and connected, every view caught up and following, the first
// round of leases taken and (after a lease TTL of grace) its share of the
// partitions held, every stream and bucket present, and, clustered, the
// embedded server's replicas current. It does no I/O beyond the embedded
// server's in-process health check.
func (d *Daemon) readiness() (Health, bool) {
	h, codes := d.readinessReasons()
	return h, len(codes) == 0
}

// readinessReasons is readiness with the reason codes (labels of
// forever_agentd_ready_reason) that hold.
func (d *Daemon) readinessReasons() (Health, map[string]bool) {
	status, connected := d.natsStatus()
	h := Health{Status: "ready", NATS: status, Projections: map[string]bool{}}
	codes := map[string]bool{}
	add := func(code, reason string) {
		codes[code] = true
		h.Reasons = append(h.Reasons, reason)
	}
	d.mu.Lock()
	started := d.mu.started
	prs := d.mu.projectors
	readies := d.mu.readies
	srv := d.mu.srv
	lg := d.mu.lg
	d.mu.Unlock()
	if !started {
		add(ReasonStarting, "agentd is starting")
	}
	if !connected {
		add(ReasonNATS, "the NATS connection is "+status)
	}
	var behind []string
	for _, pr := range prs {
		select {
		case <-pr.Ready():
			h.Projections[pr.Name()] = true
		default:
			h.Projections[pr.Name()] = false
			behind = append(behind, pr.Name())
		}
	}
	for _, r := range readies {
		select {
		case <-r.ready:
			h.Projections[r.name] = true
		default:
			h.Projections[r.name] = false
			behind = append(behind, r.name)
		}
	}
	if len(behind) > 0 && started {
		add(ReasonStarting, "catching up with the log: "+strings.Join(behind, ", "))
	}
	h.Degraded = d.degraded()
	if srv != nil && d.cfg.clustered() {
		hs := srv.Healthz(&server.HealthzOptions{})
		h.JetStream = hs.Status
		if hs.Error != "" {
			h.JetStream = hs.Error
		}
		switch {
		case hs.StatusCode == http.StatusOK:
		case d.StoreFull() != nil:
			// A full store stops the replicas of file streams (nats-server's
			// followers drop what they cannot store): the node serves reads,
			// not writes, until space returns.
			h.Degraded = append(h.Degraded, "JetStream replicas of this server are not current while the store is full: "+h.JetStream)
		default:
			add(ReasonReplicas, "JetStream replicas of this server are not current: "+h.JetStream)
		}
	}
	if mgr := d.parts.ready.Load(); mgr != nil {
		select {
		case <-mgr.Ready():
			h.Partitions, h.Assigned = mgr.OwnedCount(), mgr.Assigned()
			if mgr.Restoring() > 0 {
				add(ReasonPartitions, fmt.Sprintf("bucket %s was lost and restored: leases are taken again a lease TTL and its election grace (%s) after the loss, when no node serves the lost ones",
					mgr.Bucket(), mgr.Quiet()))
			} else if starved := mgr.Starved(); starved > mgr.TTL() {
				add(ReasonPartitions, fmt.Sprintf("owns no partition for %s while the assignment gives it %d of %d: bucket %s takes no lease of this node",
					starved.Round(time.Second), h.Assigned, mgr.Partitions(), mgr.Bucket()))
			}
		default:
			add(ReasonLeases, "the first round of partition leases is not taken yet")
		}
	}
	missing, stalled := d.guard.reasons()
	for _, r := range missing {
		add(ReasonStoreMissing, r)
	}
	full := d.StoreFull() != nil
	for _, r := range stalled {
		if full {
			// A full store in a cluster leaves file streams without a
			// leader, and their followers deliver nothing: the views serve
			// what they hold until space returns.
			h.Degraded = append(h.Degraded, r+" while the store is full")
			continue
		}
		add(ReasonViewsStalled, r)
	}
	if lg != nil {
		if err := lg.Stalled(); err != nil {
			add(ReasonViewsStalled, "views stalled: Pebble cannot write under "+d.cfg.PebbleDir()+": "+err.Error())
		}
	}
	select {
	case <-d.stopping:
		add(ReasonStopping, "agentd is stopping")
		h.Status = "stopping"
	default:
		switch {
		case !started || codes[ReasonStarting] || codes[ReasonLeases]:
			h.Status = "starting"
		case len(codes) > 0:
			h.Status = "unavailable"
		}
	}
	return h, codes
}

// degraded returns what limits the node while it serves: a full JetStream
// store, an expired TLS certificate; and a stream or bucket lost and healed
// in the last minute.
func (d *Daemon) degraded() []string {
	var out []string
	if err := d.StoreFull(); err != nil {
		out = append(out, strings.TrimPrefix(err.Error(), eventlog.ErrStorageFull.Error()+": ")+
			": commands that write are refused with 503, reads and replay go on")
	}
	if tc := d.certs.Load(); tc != nil {
		if na := tc.notAfter(); !na.IsZero() && time.Now().After(na) {
			out = append(out, fmt.Sprintf("TLS certificate %s expired at %s: clients and routes that verify it refuse it; "+
				"renew it and send SIGHUP (no restart needed)", tc.certFile, na.UTC().Format(time.RFC3339)))
		}
	}
	return append(out, d.guard.healedLosses()...)
}

// StoreFull returns an error wrapping eventlog.ErrStorageFull while the
// JetStream store has no room for more writes: the embedded server's store
// is used up to --js-max-store, or, without an embedded server to ask, an
// append was refused for want of space in the last storeFullRecent. Nil
// otherwise.
func (d *Daemon) StoreFull() error {
	if r := d.storeNow(); r.embedded {
		return r.err
	}
	d.mu.Lock()
	lg := d.mu.lg
	d.mu.Unlock()
	if lg != nil {
		if at := lg.StorageFullAt(); !at.IsZero() && time.Since(at) < storeFullRecent {
			return fmt.Errorf("%w: JetStream store full: an append was refused for want of space %s ago",
				eventlog.ErrStorageFull, time.Since(at).Round(time.Second))
		}
	}
	return nil
}

// ServerStoreFull returns StoreFull's error while the embedded server's
// store is used up to --js-max-store, and nil otherwise or without an
// embedded server. The host refuses commands that write with it, at once
// (503), rather than have their appends wait for a stream that lost its
// leader. It asks before each such command, so a reading of the server's
// usage is reused for storeFullFor. An append refused for want of space
// does not count here: a tenant's account over its storage quota gets
// that answer too, and its deletes make room at once.
func (d *Daemon) ServerStoreFull() error {
	return d.storeNow().err
}

// storeNow returns a reading of the embedded server's store no older than
// storeFullFor.
func (d *Daemon) storeNow() *storeReading {
	r := d.storeFull.Load()
	if r == nil || time.Since(r.at) >= storeFullFor {
		r = d.readStore()
		d.storeFull.Store(r)
	}
	return r
}

// readStore reads the embedded server's store.
func (d *Daemon) readStore() *storeReading {
	r := &storeReading{at: time.Now()}
	st, ok := d.storeUsage()
	if !ok {
		return r
	}
	r.embedded = true
	if st.storeMax > 0 && st.store >= st.storeMax-storeFullSlack {
		r.err = fmt.Errorf("%w: JetStream store full: %s used of %s (--js-max-store)",
			eventlog.ErrStorageFull, bytesString(st.store), bytesString(st.storeMax))
	}
	return r
}

// storeReading is one reading of the embedded server's store for
// StoreFull: embedded is false where there is none to ask (a tenant's
// daemon, an external NATS), and err says whether it was full.
type storeReading struct {
	at       time.Time
	embedded bool
	err      error
}

// storeFullFor is how long StoreFull reuses a reading: the embedded
// server's usage (Jsz) walks its accounts, and the host asks before each
// command that writes.
const storeFullFor = 250 * time.Millisecond

// storeFullSlack is how close to --js-max-store the embedded server's store
// counts as full: less than one more chunk batch fits.
const storeFullSlack = 1 << 20

// bytesString formats n bytes in MiB with one decimal.
func bytesString(n int64) string {
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
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
		h = cfg.hostCheck(h)
	}
	// With tracing, requests under /v1/ get a server span (the child of
	// their traceparent with --trust-traceparent, else linked to it) and
	// their responses Forever-Trace-Id.
	h = tracing.Handler(tracing.New(cfg.TracerProvider, "agentd"), cfg.TrustTraceparent, h)
	front := http.NewServeMux()
	front.HandleFunc("GET /healthz", d.handleHealthz)
	front.HandleFunc("GET /readyz", d.handleReadyz)
	front.Handle("/", h)
	return front
}

// hostCheck is h behind the DNS-rebinding Host check: loopback hosts and
// --allowed-host pass, any other Host gets 403 (replay.HostCheck).
func (c *Config) hostCheck(h http.Handler) http.Handler {
	hosts, _ := replay.ParseHostPatterns(c.AllowedHosts) // Validate parsed them
	return replay.HostCheck(hosts, h)
}

// logReady logs, once the node is ready, the line that says where to point
// a browser and a client: the chat page, the NATS URL and the data dir.
func (d *Daemon) logReady(ctx context.Context) {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for !d.Ready() {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
	scheme := "http"
	if d.certs.Load() != nil {
		scheme = "https"
	}
	page := scheme + "://" + d.HTTPAddr() + "/"
	dataDir := d.cfg.DataDir
	if abs, err := filepath.Abs(dataDir); err == nil {
		dataDir = abs
	}
	attrs := []any{"chat", page}
	msg := "agentd ready: chat at " + page
	// The console, when the program serves one (the agentd command does).
	if _, pattern := d.mux.Handler(&http.Request{Method: http.MethodGet, URL: &url.URL{Path: "/console"}}); pattern == "GET /console" {
		attrs = append(attrs, "console", page+"console")
		msg += ", console at " + page + "console"
	}
	d.logger.Info(msg, append(attrs, "nats_url", redactURL(d.NATSURL()), "data", dataDir)...)
}
