package agentd

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/forever-agents/forever/agentd/quota"
	"github.com/forever-agents/forever/auth"
	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/ownership"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"golang.org/x/sync/errgroup"
)

// Daemon runs agentd: the embedded (or an external) NATS server, the event
// log with its Pebble projections, the HTTP server and the components added
// to it. Create it with New, wire it with OnStart, Add, AddProjector and
// Handle, then call Run once. Its methods are safe for concurrent use.
type Daemon struct {
	cfg      Config
	logger   *slog.Logger
	gatherer prometheus.Gatherer
	mux      *http.ServeMux
	started  chan struct{} // closed once Run finished starting
	stopping chan struct{} // closed when shutdown begins
	// front is what the HTTP server serves: while Run starts (NATS, a
	// JetStream quorum, the views), only /healthz and a 503 /readyz; then
	// mux.
	front atomic.Pointer[http.Handler]
	// metricsHandler serves /metrics, also while starting.
	metricsHandler http.Handler
	parts          partitions // partition leases and their handlers
	// repliesRefused counts the answers the server refused (replies.go).
	repliesRefused prometheus.Counter
	// quotas enforces a tenant daemon's quotas, else nil.
	quotas *quota.Enforcer
	// certs is the TLS certificate with --tls-cert, else nil; set by Run
	// before anything listens.
	certs atomic.Pointer[certs]
	// httpm are the HTTP connection metrics (nil on a tenant's daemon);
	// httpOpen counts the open connections once the listener is made.
	httpm    *httpMetrics
	httpOpen atomic.Pointer[atomic.Int64]
	// metricsListen is the metrics listener's address, once it listens.
	metricsListen atomic.Pointer[string]
	// denials counts the embedded server's refusals and bounds their log.
	denials *denialLog
	// guard watches the streams and buckets under the running node.
	guard *guard
	// storeFull is StoreFull's last reading of the embedded server's
	// usage, reused for storeFullFor.
	storeFull atomic.Pointer[storeReading]

	mu struct {
		sync.Mutex
		running    bool // Run was called
		started    bool // components are fixed and running
		hooks      []StartFunc
		gatherers  prometheus.Gatherers // AddGatherer's, besides Config.Gatherer
		components []namedComponent
		projectors []*eventlog.Projector
		readies    []namedReady
		nc         *nats.Conn
		httpAddr   string
		natsURL    string
		srv        *server.Server // the embedded server, nil with --nats-url
		lg         *eventlog.Log  // set once started
		storeLost  []StoreLostFunc
	}
}

type namedReady struct {
	name  string
	ready <-chan struct{}
}

type namedComponent struct {
	name string
	c    Component
}

// New checks cfg (after applying defaults) and prepares a Daemon; nothing
// starts until Run. Errors wrap ErrConfig.
func New(cfg Config) (*Daemon, error) {
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Registerer == nil {
		reg := newRegistry()
		cfg.Registerer, cfg.Gatherer = reg, reg
	}
	d := &Daemon{
		cfg:      cfg,
		logger:   cfg.Logger.With("subsystem", "agentd"),
		gatherer: cfg.Gatherer,
		mux:      http.NewServeMux(),
		started:  make(chan struct{}),
		stopping: make(chan struct{}),
		parts:    partitions{sealed: make(chan struct{})},
	}
	if err := d.registerMetrics(cfg.Registerer); err != nil {
		return nil, err
	}
	if err := d.registerReplyMetrics(cfg.Registerer); err != nil {
		return nil, err
	}
	var err error
	if d.guard, err = newGuard(cfg.Logger, cfg.Registerer); err != nil {
		return nil, err
	}
	if err := d.registerHTTPMetrics(cfg.Registerer); err != nil {
		return nil, err
	}
	if cfg.Tenant == nil {
		denials, err := newDenialLog(cfg.Registerer)
		if err != nil {
			return nil, err
		}
		d.denials = denials
	}
	if cfg.Quota != (auth.Quota{}) {
		var err error
		if d.quotas, err = quota.New(cfg.Quota, cfg.Registerer); err != nil {
			return nil, err
		}
	}
	gatherer := prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
		d.mu.Lock()
		gs := append(prometheus.Gatherers{cfg.Gatherer}, d.mu.gatherers...)
		d.mu.Unlock()
		return gs.Gather()
	})
	d.metricsHandler = promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{
		ErrorLog: slog.NewLogLogger(d.logger.Handler(), slog.LevelWarn),
	})
	d.mux.Handle("GET /metrics", d.metricsHandler)
	d.mux.HandleFunc("GET /healthz", d.handleHealthz)
	d.mux.HandleFunc("GET /readyz", d.handleReadyz)
	if !cfg.Auth {
		// Under auth /debug/ on the HTTP port is the tenants' (their
		// admins'); the node's quarantine is on the metrics listener.
		d.mux.HandleFunc("GET /debug/quarantine", d.handleQuarantine)
		// Under auth /v1/ is the tenants' (their daemons serve this); the
		// admin token reaches the node's (package tenancy).
		d.mux.HandleFunc("GET /v1/cluster", d.handleCluster)
	}
	return d, nil
}

// Config returns the config with defaults applied.
func (d *Daemon) Config() Config { return d.cfg }

// Quotas returns the enforcer of Config.Quota, nil without a quota (a nil
// *quota.Enforcer allows everything).
func (d *Daemon) Quotas() *quota.Enforcer { return d.quotas }

// AddGatherer adds metrics that /metrics serves besides Config.Gatherer's
// (package tenancy adds the tenants' daemons'). It may be called at any
// time.
func (d *Daemon) AddGatherer(g prometheus.Gatherer) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.mu.gatherers = append(d.mu.gatherers, g)
}

// OnStart adds fn to the functions Run calls, in order, once NATS and the
// event log are open. Call it before Run; afterwards it returns ErrStarted.
func (d *Daemon) OnStart(fn StartFunc) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.mu.running {
		return ErrStarted
	}
	d.mu.hooks = append(d.mu.hooks, fn)
	return nil
}

// Add adds a component that Run runs until shutdown. Call it before Run or
// from a StartFunc; afterwards it returns ErrStarted. name appears in logs
// and errors.
func (d *Daemon) Add(name string, c Component) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.mu.started {
		return ErrStarted
	}
	d.mu.components = append(d.mu.components, namedComponent{name, c})
	return nil
}

// AddProjector runs pr like a component and holds /readyz at 503 until pr is
// ready. Call it from a StartFunc (the projector needs the Log in Deps);
// afterwards it returns ErrStarted.
func (d *Daemon) AddProjector(pr *eventlog.Projector) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.mu.started {
		return ErrStarted
	}
	d.mu.components = append(d.mu.components, namedComponent{"projection " + pr.Name(), pr})
	d.mu.projectors = append(d.mu.projectors, pr)
	d.guard.watchView(pr.Name(), pr.Stream(), pr.Cursor)
	return nil
}

// addViews runs views, the follower of Deps.Views, like a component when a
// StartFunc added projections to it, and holds /readyz until it is ready.
func (d *Daemon) addViews(views *eventlog.Follower) error {
	names := views.Names()
	if len(names) == 0 {
		return nil
	}
	for _, name := range names {
		if err := d.AddReady(name, views.Ready()); err != nil {
			return err
		}
	}
	d.guard.watchView(strings.Join(names, ","), views.Stream(), views.Cursor)
	return d.Add("projections "+strings.Join(names, ","), views)
}

// AddReady holds /readyz at 503 until ready is closed. Use it for a view a
// component runs itself (a Component that owns its projector). Call it from
// a StartFunc; afterwards it returns ErrStarted.
func (d *Daemon) AddReady(name string, ready <-chan struct{}) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.mu.started {
		return ErrStarted
	}
	d.mu.readies = append(d.mu.readies, namedReady{name, ready})
	return nil
}

// Handle registers an HTTP handler on the daemon's server, with the pattern
// syntax of http.ServeMux (which panics on a conflicting pattern). It may be
// called at any time. /metrics, /healthz and /readyz are taken.
func (d *Daemon) Handle(pattern string, h http.Handler) { d.mux.Handle(pattern, h) }

// HandleFunc is Handle for a function.
func (d *Daemon) HandleFunc(pattern string, h func(http.ResponseWriter, *http.Request)) {
	d.mux.HandleFunc(pattern, h)
}

// Handler serves the daemon's HTTP routes (those of its mux once started;
// 503 "starting" before). The daemon serving tenants calls it for a
// tenant's daemon, which has no listener of its own.
func (d *Daemon) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if h := d.front.Load(); h != nil {
			(*h).ServeHTTP(w, r)
			return
		}
		w.Header().Set("Retry-After", "1")
		writeJSON(w, http.StatusServiceUnavailable, Health{Status: "starting"})
	})
}

// Started is closed once Run has started everything; HTTPAddr and NATSURL
// are then set.
func (d *Daemon) Started() <-chan struct{} { return d.started }

// Stopping is closed when the graceful shutdown begins, before HTTP stops
// accepting requests. Long-lived handlers (streams) should end when it is.
func (d *Daemon) Stopping() <-chan struct{} { return d.stopping }

// Ready reports whether /readyz would answer 200.
func (d *Daemon) Ready() bool {
	_, ok := d.readiness()
	return ok
}

// HTTPAddr returns the address the HTTP server listens on (with the port
// picked when Config.HTTPAddr had port 0), empty before Started.
func (d *Daemon) HTTPAddr() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.mu.httpAddr
}

// NATSURL returns the URL clients use to reach NATS (the embedded server's
// client URL, or Config.NATSURL), empty before Started.
func (d *Daemon) NATSURL() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.mu.natsURL
}

// Run starts the daemon, blocks until ctx is done or a component fails, then
// shuts down gracefully in order: HTTP stops accepting requests (in-flight
// ones get Config.ShutdownTimeout), components and projectors are cancelled
// and waited for, the NATS connection is drained, the event log (Pebble) is
// closed, and the embedded server is shut down and waited for.
//
// It returns nil after a shutdown caused by ctx, the first component error
// otherwise, joined with any shutdown error. Start-up errors: ErrDataDir,
// ErrAddrInUse, ErrConfig, ErrNATS (each with a one-line message naming the
// flag to change), a StartFunc's error, or ErrStarted when called twice.
func (d *Daemon) Run(ctx context.Context) error {
	d.mu.Lock()
	if d.mu.running {
		d.mu.Unlock()
		return ErrStarted
	}
	d.mu.running = true
	hooks := d.mu.hooks
	d.mu.Unlock()

	cfg := &d.cfg
	if err := prepareDataDir(cfg.DataDir); err != nil {
		return err
	}
	tc, err := loadCerts(cfg)
	if err != nil {
		return err
	}
	d.certs.Store(tc)
	stopMetrics, err := d.serveMetrics()
	if err != nil {
		return err
	}
	defer stopMetrics()
	// A tenant's daemon has no listener: the daemon serving the tenants
	// routes its requests (Handler).
	var ln net.Listener
	if cfg.Tenant == nil {
		var err error
		if ln, err = listen("http address", "http", cfg.HTTPAddr); err != nil {
			return err
		}
	}
	// HTTP answers from the start, so probes see "starting" (and the
	// rest 503) while agentd waits for NATS, a quorum or its views,
	// instead of hanging on an accepted connection nobody serves.
	starting := d.startingHandler()
	d.front.Store(&starting)
	reqCtx, cancelRequests := context.WithCancel(context.WithoutCancel(ctx))
	hs := d.newHTTPServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { (*d.front.Load()).ServeHTTP(w, r) }))
	hs.BaseContext = func(net.Listener) context.Context { return reqCtx }
	hs.ErrorLog = slog.NewLogLogger(d.logger.Handler(), slog.LevelWarn)
	web := &webServer{hs: hs, cancel: cancelRequests, served: make(chan error, 1)}
	if ln != nil {
		web.addr = ln.Addr().String()
		var serverTLS *tls.Config
		if tc != nil {
			serverTLS = tc.serverConfig()
		}
		ln = d.limitConns(ln, serverTLS, hs.Handler)
		if tc != nil {
			hs.TLSConfig = tc.serverConfig()
			go func() { web.served <- hs.ServeTLS(ln, "", "") }()
		} else {
			go func() { web.served <- hs.Serve(ln) }()
		}
	}
	var r resources
	r.closed = make(chan struct{})
	fail := func(err error) error {
		hs.Close()
		cancelRequests()
		return errors.Join(err, d.parts.handoff(cfg.ShutdownTimeout+cfg.LeaseTTL), d.teardown(&r))
	}
	var op *Operator
	if cfg.Auth {
		if op, err = openOperator(cfg); err != nil {
			return fail(err)
		}
	}
	if cfg.NATSURL == "" {
		if r.srv, err = startServer(ctx, cfg, d.cfg.Logger, op, tc, d.denials); err != nil {
			return fail(err)
		}
	}
	if r.nc, err = connect(cfg, r.srv, d.cfg.Logger, r.closed, op); err != nil {
		return fail(err)
	}
	if r.srv != nil && cfg.clustered() {
		// A JetStream request sent before the server knows its meta
		// leader is not answered and waits out a whole attempt of
		// RetryQuorum (3 s of a restart's 4 to 9 s on 2 cores). The
		// nudges make a restarted member current in a fraction of a
		// second instead of 1-3 s (waitMeta).
		began := time.Now()
		current := waitMeta(ctx, r.srv, quorumAttempt, nudgeMeta(r.nc, "KV_"+ownership.DefaultBucket))
		d.logger.Debug("waited for the JetStream meta leader", "current", current, "took", time.Since(began))
		if op != nil {
			// Before any tenant connection opens: the others stop
			// counting a SIGKILLed server's connections.
			d.endPreviousServer(cfg, r.srv, op)
		}
	}
	d.mu.Lock()
	d.mu.nc = r.nc
	d.mu.Unlock()
	if r.rc, err = d.connectReplier(cfg); err != nil {
		return fail(err)
	}
	if d.quotas != nil {
		js, err := jetstream.New(r.nc)
		if err != nil {
			return fail(err)
		}
		d.quotas.Bind(js)
	}
	cfg.Replicas = replicasFor(cfg, r.nc)
	if err := d.parts.open(ctx, cfg, r.nc, d); err != nil {
		return fail(err)
	}
	lcfg := eventlog.Config{
		Conn:         r.nc,
		Replicas:     cfg.Replicas,
		MaxConsumers: cfg.MaxStreamConsumers,
		Shards:       d.logShards(cfg),
		Partitions:   cfg.Partitions,
		OwnedViews:   cfg.ownedViews(d.logShards(cfg)),
		Owner:        &d.parts,
		Leaving:      d.parts.leaving,
		OnFenced:     d.parts.onFenced,
		Dir:          cfg.PebbleDir(),
		FS:           cfg.PebbleFS,
		ChunkMaxAge:  cfg.ChunkMaxAge,
		// Without a fsync per write, atomic batches (staged in a synced
		// store by the server) are slower than plain async publishes. The
		// log is fenced (Owner), so it keeps batches atomic anyway: only
		// an atomic batch carries one expected sequence for all its events.
		AsyncBatches: cfg.Sync == SyncInterval && cfg.NATSURL == "",
		Logger:       d.cfg.Logger,
		Registerer:   cfg.Registerer,
	}
	if lcfg.Shards > 1 && !lcfg.OwnedViews && !cfg.AllViews {
		d.logger.Warn("every node projects every partition of this sharded cluster: a per-user budget (--user-token-budget, --user-cost-budget) reads the spend of a user's agents from every partition")
	}
	err = RetryQuorum(ctx, d.logger, "event log", cfg.Replicas, func(ctx context.Context) (err error) {
		r.lg, err = eventlog.Open(ctx, lcfg)
		return err
	})
	if err != nil {
		return fail(fmt.Errorf("agentd: open event log: %w", err))
	}
	// Leases are taken from now on, once the log is open: a node
	// restarted after a SIGKILL would otherwise take its old leases back
	// (unexpired) and hold its agents while its streams still refuse to
	// open, where the survivors would have taken them over after a TTL.
	// Start hooks can wait for Ownership.Ready and write as owners;
	// partitions are served once the hooks registered their handlers.
	d.parts.run(ctx)
	views, err := r.lg.NewFollower()
	if err != nil {
		return fail(fmt.Errorf("agentd: open event log: %w", err))
	}
	d.guardStores(r.lg, views)
	deps := &Deps{Config: *cfg, Conn: r.nc, Replies: cmp.Or(r.rc, r.nc), Log: r.lg, Server: r.srv, Ownership: d.parts.mgr,
		Views: views, Operator: op, Quotas: d.quotas, Logger: d.cfg.Logger, Registerer: cfg.Registerer}
	for _, fn := range hooks {
		if err := fn(ctx, deps); err != nil {
			return fail(fmt.Errorf("agentd: start: %w", err))
		}
	}
	if err := d.addViews(views); err != nil {
		return fail(fmt.Errorf("agentd: start: %w", err))
	}
	embedded := r.srv
	if cfg.Tenant != nil {
		embedded = cfg.Tenant.Server
	}
	if err := d.addLeaderSpread(r.lg, embedded); err != nil {
		return fail(fmt.Errorf("agentd: start: %w", err))
	}
	d.parts.seal()
	return d.serve(ctx, web, &r)
}

// resources are what Run opened, torn down in reverse order.
type resources struct {
	srv    *server.Server
	nc     *nats.Conn
	rc     *nats.Conn    // the replier's (Deps.Replies), nil without one
	closed chan struct{} // closed when nc is closed
	lg     *eventlog.Log
}

// serve runs the components and the HTTP server until ctx is done or one of
// them fails, then shuts everything down.
func (d *Daemon) serve(ctx context.Context, web *webServer, r *resources) error {
	cfg := &d.cfg
	g, gctx := errgroup.WithContext(ctx)
	// Components outlive gctx until HTTP has stopped; values come from ctx.
	compCtx, stopComponents := context.WithCancel(context.WithoutCancel(ctx))
	defer stopComponents()
	hs, cancelRequests := web.hs, web.cancel
	defer cancelRequests()
	full := d.frontDoor()
	d.front.Store(&full)

	d.mu.Lock()
	d.mu.started = true
	components := d.mu.components
	d.mu.httpAddr = web.addr
	d.mu.natsURL = cfg.NATSURL
	d.mu.lg = r.lg
	if r.srv != nil {
		d.mu.natsURL = r.srv.ClientURL()
		d.mu.srv = r.srv
	}
	d.mu.Unlock()

	// The lease manager runs outside the components: at shutdown it hands
	// every partition off (its agents stop, the leases are deleted) while
	// the components they write through still run.
	handoff := func() error { return d.parts.handoff(cfg.ShutdownTimeout + cfg.LeaseTTL) }
	g.Go(func() error {
		select {
		case err := <-d.parts.done:
			d.parts.done <- err
			if err != nil {
				return fmt.Errorf("agentd: partition leases: %w", err)
			}
		case <-gctx.Done():
		}
		return nil
	})
	g.Go(func() error { return d.guard.run(compCtx, r.nc) })
	for _, nc := range components {
		g.Go(func() error {
			if err := nc.c.Run(compCtx); err != nil {
				return fmt.Errorf("agentd: %s: %w", nc.name, err)
			}
			if compCtx.Err() == nil {
				d.logger.Info("component returned before shutdown", "component", nc.name)
			}
			return nil
		})
	}
	g.Go(func() error {
		if web.addr == "" { // a tenant's daemon: no listener
			<-gctx.Done()
			return nil
		}
		if err := <-web.served; !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("agentd: http: %w", err)
		}
		return nil
	})
	g.Go(func() error {
		<-gctx.Done()
		close(d.stopping)
		d.logger.Info("agentd stopping", "cause", context.Cause(gctx))
		// Move this server's stream leaders first, so their elections do
		// not meet the new owners' recovery; then hand the partitions
		// off, so other nodes take the agents over at once instead of
		// after the lease TTL.
		d.leadAway(r)
		hstart := time.Now()
		if err := handoff(); err != nil {
			d.logger.Warn("partition handoff", "err", err)
		} else {
			d.logger.Info("partitions handed off", "took", time.Since(hstart))
		}
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.ShutdownTimeout)
		defer cancel()
		err := hs.Shutdown(sctx)
		cancelRequests()
		if err != nil {
			d.logger.Warn("http requests still running after the shutdown timeout; closing them",
				"timeout", cfg.ShutdownTimeout, "err", err)
			hs.Close()
		}
		stopComponents()
		return nil
	})
	d.logStarted(r)
	close(d.started)
	if cfg.Tenant == nil {
		go d.logReady(gctx)
	}

	err := g.Wait()
	terr := d.teardown(r)
	if terr == nil && err == nil {
		d.logger.Info("agentd stopped")
	}
	return errors.Join(err, terr)
}

// teardown drains the NATS connection, closes the event log and shuts the
// embedded server down, skipping what was not opened.
func (d *Daemon) teardown(r *resources) error {
	var errs []error
	if r.nc != nil {
		if err := r.nc.Drain(); err != nil {
			r.nc.Close()
		}
		// Drain closes the connection within DrainTimeout (ShutdownTimeout).
		t := time.NewTimer(d.cfg.ShutdownTimeout + time.Second)
		select {
		case <-r.closed:
		case <-t.C:
			errs = append(errs, fmt.Errorf("agentd: nats drain did not finish within %s", d.cfg.ShutdownTimeout))
			r.nc.Close()
		}
		t.Stop()
	}
	if r.rc != nil {
		// Answers were sent before nc drained (commands in flight answer
		// before the components return); the last ones leave now.
		_ = r.rc.FlushTimeout(time.Second)
		r.rc.Close()
	}
	if r.lg != nil {
		if err := r.lg.Close(); err != nil {
			errs = append(errs, fmt.Errorf("agentd: close event log: %w", err))
		}
	}
	if r.srv != nil {
		if d.cfg.clustered() {
			// Leaderships move and clients are sent to the other nodes.
			r.srv.LameDuckShutdown()
		} else {
			r.srv.Shutdown()
		}
		r.srv.WaitForShutdown()
	}
	return errors.Join(errs...)
}

// ReloadTLS reads --tls-cert and --tls-key again (agentd calls it on
// SIGHUP): new HTTPS, NATS client and route connections get the new
// certificate; on an error the old one stays in use. Without TLS it does
// nothing.
func (d *Daemon) ReloadTLS() error {
	tc := d.certs.Load()
	if tc == nil {
		return nil
	}
	if err := tc.Reload(); err != nil {
		d.logger.Error("tls reload failed; the old certificate stays in use", "err", err)
		return err
	}
	d.logger.Info("tls certificate reloaded", "cert", tc.certFile, "not_after", tc.notAfter())
	if na := tc.notAfter(); !na.IsZero() && time.Now().After(na) {
		d.logger.Error("the reloaded TLS certificate has expired already", "cert", tc.certFile, "not_after", na)
	}
	return nil
}

// logStarted writes the start-up line and, with --sync interval, the
// durability warning.
func (d *Daemon) logStarted(r *resources) {
	cfg := &d.cfg
	dataDir := cfg.DataDir
	if abs, err := filepath.Abs(dataDir); err == nil {
		dataDir = abs
	}
	syncMode := cfg.Sync
	if r.srv == nil {
		syncMode = "set by the external server"
	}
	d.logger.Info("agentd started",
		"data", dataDir,
		"nats_url", redactURL(d.NATSURL()),
		"nats_embedded", r.srv != nil,
		"sync", syncMode,
		"http", d.HTTPAddr(),
		"metrics", d.MetricsAddr(),
		"log_level", levelString(cfg.LogLevel),
	)
	switch {
	case cfg.Tenant != nil:
	case !cfg.Auth && cfg.Insecure:
		d.logger.Warn("auth is off (--insecure): anyone who reaches the NATS and HTTP ports can command every agent and read every chat")
	case !cfg.Auth:
		d.logger.Info("auth is off: agentd listens on loopback only, and anyone on this machine can command every agent; use --auth for tenants and credentials")
	}
	d.warnPlaintext()
	if tc := d.certs.Load(); tc != nil {
		if na := tc.notAfter(); !na.IsZero() && time.Now().After(na) {
			d.logger.Error("the TLS certificate has expired: clients and routes that verify it refuse it; renew it and send SIGHUP",
				"cert", tc.certFile, "not_after", na)
		}
	}
	if r.srv != nil && cfg.Sync == SyncInterval {
		d.logger.Warn("JetStream syncs to disk on an interval, not on every write: acknowledged writes can be lost on power failure " +
			"(the Jepsen analysis of NATS 2.12.1, 2025, showed it); use --sync always for durability")
	}
}
