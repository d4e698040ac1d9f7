package tenancy

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"time"

	"github.com/forever-agents/forever/internal/inproc"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/forever-agents/forever/agentd"
	"github.com/forever-agents/forever/agentd/audit"
	"github.com/forever-agents/forever/agentd/host"
	"github.com/forever-agents/forever/agentd/quota"
	"github.com/forever-agents/forever/auth"
	"github.com/forever-agents/forever/internal/backoff"
	"github.com/forever-agents/forever/internal/kvwatch"
	"github.com/forever-agents/forever/internal/promreg"
)

// TenantsBucket is the KV bucket (in agentd's own account) holding one
// auth.Tenant record per tenant, keyed by name.
const TenantsBucket = "FOREVER_TENANTS"

// tenantStartTimeout bounds how long tenant create waits for the new
// tenant's daemon to be ready.
const tenantStartTimeout = 60 * time.Second

// tenantRetry is how long a tenant whose daemon could not be built waits
// before the next attempt.
const tenantRetry = 5 * time.Second

// tenantSet runs a daemon per tenant inside a daemon with Auth: each in
// its own NATS account, with its own streams, KV buckets and Pebble views
// under <data>/tenants/<name>. It keeps the registry, serves the admin
// service, and routes HTTP requests by bearer token (tenant_http.go).
type tenantSet struct {
	parent *agentd.Daemon
	setup  func(*agentd.Daemon) error // wires a tenant's daemon
	// newShards is the shard count a tenant's new log is created with:
	// the node's (Daemon.Shards); tests make tenants unsharded as an
	// earlier release did (export_test.go).
	newShards func() int
	// moveStop bounds a tenant move's wait for every node to stop the
	// tenant's daemon (moveStopTimeout; tests shorten it).
	moveStop time.Duration
	logger   *slog.Logger
	// authRefused counts HTTP requests refused for their bearer token.
	authRefused *prometheus.CounterVec
	// moves counts tenant moves into shards by outcome (handleMove).
	moves *prometheus.CounterVec

	// Set by open, before the component runs.
	op     *agentd.Operator
	deps   *agentd.Deps
	js     jetstream.JetStream
	kv     jetstream.KeyValue
	sys    *nats.Conn // system account user: account claim updates
	verify tokenVerifier
	audit  *audit.Log // the audit log (nil until open)

	ready chan struct{} // closed once the tenants of the registry at start are ready

	mu struct {
		sync.Mutex
		ctx    context.Context // the component's; nil before Run
		runs   map[string]*tenantRun
		tokens map[string]*tokenEntry  // token hash -> its credential
		states map[string]*tenantState // every tenant of the registry
	}
	wg     sync.WaitGroup
	pushMu sync.Mutex // serializes account pushes (pushLatest)
}

// tenantRun is one tenant's daemon.
type tenantRun struct {
	name   string
	d      *agentd.Daemon
	reg    *prometheus.Registry
	cancel context.CancelFunc // stops d (the tenant was disabled)
	done   chan struct{}      // closed when d.Run returned
	err    error              // d.Run's, set before done is closed
}

// tokenEntry is a live HTTP token; revoked is closed when it is revoked,
// which ends the requests (streams, WebSockets) it opened.
type tokenEntry struct {
	tenant  string
	cred    auth.Credential
	revoked chan struct{}
}

// tenantState is what the HTTP front door checks of a tenant on every
// request, whatever the token: disabled, and when every credential was
// last revoked (OIDC tokens issued before are refused). cut is closed,
// and made again, when the tenant is disabled or all its credentials are
// revoked: it ends every request the tenant has open.
type tenantState struct {
	rec       *auth.Tenant // the latest record (remember)
	rev       uint64       // its revision in the registry
	disabled  bool
	moving    bool  // its log moves into shards (auth.Tenant.Moving): no daemon runs
	stopErr   error // why its last daemon stopped on its own; nil while one runs
	revokedAt int64
	cut       chan struct{}
}

// Attach serves tenants from d, which must have Config.Auth: a daemon per
// tenant, each wired by setup as a daemon without auth is wired (agent
// types, gateway); the tenant registry; the admin service; and d's HTTP
// routes, by bearer token, to the tenants' daemons. Call it before d.Run.
func Attach(d *agentd.Daemon, setup func(*agentd.Daemon) error) error {
	return attach(d, setup, d.Shards, moveStopTimeout)
}

// attach is Attach whose tenants' new logs take newShards' count, and
// whose moves wait up to moveStop for the tenant's nodes to stop.
func attach(d *agentd.Daemon, setup func(*agentd.Daemon) error, newShards func() int, moveStop time.Duration) error {
	cfg := d.Config()
	if !cfg.Auth || setup == nil {
		return fmt.Errorf("%w: tenants need Config.Auth and a setup function to wire each tenant", agentd.ErrConfig)
	}
	ts := &tenantSet{parent: d, setup: setup, newShards: newShards, moveStop: moveStop, logger: cfg.Logger.With("subsystem", "tenants")}
	ts.mu.runs = make(map[string]*tenantRun)
	ts.mu.tokens = make(map[string]*tokenEntry)
	ts.mu.states = make(map[string]*tenantState)
	ts.authRefused = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "forever_auth_refused_total",
		Help: "HTTP requests refused, by reason: missing, invalid, expired or revoked bearer token (401); an OIDC token naming a tenant that does not exist (unknown-tenant), a disabled tenant, a path the credential's role does not reach (role) (403); the admin token without X-Forever-Tenant (no-tenant, 400).",
	}, []string{"reason"})
	ts.moves = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "forever_tenant_moves_total",
		Help: "Tenant logs moved into the node's shards (agentd tenant move), by outcome: moved, finished (a move stopped part way, finished), already (nothing to do), failed.",
	}, []string{"outcome"})
	running := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "forever_tenants_running",
		Help: "Tenant daemons running on this node.",
	}, func() float64 { return float64(ts.running()) })
	for _, c := range []prometheus.Collector{ts.authRefused, ts.moves, running} {
		if err := cfg.Registerer.Register(c); err != nil {
			return fmt.Errorf("%w: register metrics: %w", agentd.ErrConfig, err)
		}
	}
	d.AddGatherer(ts)
	d.OnNATSDenial(ts.natsDenied)
	return d.OnStart(ts.open)
}

// open creates the registry bucket, connects the system user, adds the
// admin service and the tenants component, and routes HTTP to tenants.
func (ts *tenantSet) open(ctx context.Context, deps *agentd.Deps) error {
	op := deps.Operator
	if op == nil {
		return fmt.Errorf("%w: tenants need Config.Auth", agentd.ErrConfig)
	}
	ts.op, ts.deps = op, deps
	js, err := jetstream.New(deps.Conn)
	if err != nil {
		return err
	}
	ts.js = js
	err = agentd.RetryQuorum(ctx, ts.logger, "tenant registry", deps.Config.Replicas, func(ctx context.Context) (err error) {
		ts.kv, err = js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
			Bucket:      TenantsBucket,
			Description: "Forever tenants (auth.Tenant records)",
			History:     1,
			Replicas:    deps.Config.Replicas,
			Storage:     jetstream.FileStorage,
		})
		return err
	})
	if err != nil {
		return fmt.Errorf("tenant registry: %w", err)
	}
	err = agentd.RetryQuorum(ctx, ts.logger, "audit log", deps.Config.Replicas, func(ctx context.Context) (err error) {
		ts.audit, err = audit.Open(ctx, audit.Config{
			JS: js, Replicas: deps.Config.Replicas, MaxAge: deps.Config.AuditMaxAge, MaxBytes: deps.Config.AuditBytes(),
			Node: deps.Config.ServerName, Logger: ts.logger, Registerer: deps.Config.Registerer,
		})
		return err
	})
	if err != nil {
		return err
	}
	if err := ts.parent.Add("audit log", agentd.ComponentFunc(ts.audit.Run)); err != nil {
		return err
	}
	sysOpts := []nats.Option{nats.Name("agentd system"), nats.MaxReconnects(-1),
		nats.UserJWTAndSeed(op.System.JWT, string(op.System.Seed))}
	sysURL := deps.Config.NATSURL
	if deps.Server != nil {
		sysURL = agentd.InProcessURL(deps.Server)
		sysOpts = append(sysOpts, inproc.Server(deps.Server))
	} else {
		sysOpts = append(sysOpts, deps.Config.ClientTLS()...)
	}
	ts.sys, err = nats.Connect(sysURL, sysOpts...)
	if err != nil {
		return fmt.Errorf("%w: system account connection: %w", agentd.ErrNATS, err)
	}
	if deps.Config.OIDCIssuer != "" {
		if ts.verify, err = newOIDCVerifier(ctx, deps.Config); err != nil {
			ts.sys.Close()
			return err
		}
	}
	if err := ts.startAdmin(deps.Conn); err != nil {
		ts.sys.Close()
		return err
	}
	ts.parent.Handle("/", ts)
	// /readyz waits until the tenants in the registry at start are served.
	ts.ready = make(chan struct{})
	if err := ts.parent.AddReady("tenants", ts.ready); err != nil {
		ts.sys.Close()
		return err
	}
	if op.Created {
		ts.logger.Info("auth is on: first start, admin credential written",
			"admin_creds", filepath.Join(deps.Config.DataDir, agentd.AdminCredsFile))
	} else {
		ts.logger.Info("auth is on", "admin_creds", filepath.Join(deps.Config.DataDir, agentd.AdminCredsFile))
	}
	return ts.parent.Add("tenants", agentd.ComponentFunc(ts.run))
}

// run starts a daemon for every tenant in the registry and for each one
// created later, until ctx ends; then it waits for them to stop.
func (ts *tenantSet) run(ctx context.Context) error {
	defer ts.sys.Close()
	ts.mu.Lock()
	ts.mu.ctx = ctx
	ts.mu.Unlock()
	defer ts.wg.Wait()
	restarts, err := promreg.Register(ts.deps.Config.Registerer, prometheus.NewCounter(prometheus.CounterOpts{
		Name: "forever_tenants_watch_restarts_total",
		Help: "Tenant registry watches made again because they lagged the bucket (their server died).",
	}))
	if err != nil {
		return err
	}
	// The registry watch is made again when it lags the bucket (its
	// consumer's server died): otherwise a tenant created, or a token
	// revoked, would reach this node only when nats.go noticed, 19 s later.
	return kvwatch.Run(ctx, kvwatch.Config{
		JS:        ts.js,
		Bucket:    TenantsBucket,
		Logger:    ts.logger,
		OnRestart: restarts.Inc,
		Apply:     func(e jetstream.KeyValueEntry) { ts.record(ctx, e) },
		Synced: func(first bool) {
			if first { // every record at start was delivered
				go ts.markReady(ctx)
			}
		},
	})
}

// record applies one registry entry: a tenant record put (a deletion
// changes nothing; revocations are puts). It is idempotent, as a watch
// made again delivers every record again.
func (ts *tenantSet) record(ctx context.Context, e jetstream.KeyValueEntry) {
	if e.Operation() != jetstream.KeyValuePut {
		return
	}
	var t auth.Tenant
	err := json.Unmarshal(e.Value(), &t)
	if err == nil {
		err = t.Validate()
	}
	if err == nil && t.Name != e.Key() {
		err = fmt.Errorf("the record names tenant %q", t.Name)
	}
	if err != nil {
		ts.logger.Error("tenant record is invalid; skipped", "key", e.Key(), "revision", e.Revision(), "err", err)
		return
	}
	if !ts.remember(&t, e.Revision()) {
		return // this node stored a later revision itself
	}
	// The resolver keeps account JWTs, but the registry is the truth: push
	// it again (revocations included).
	if t.Disabled {
		// The account of a disabled tenant refuses every connection:
		// stop this node's daemon first, so it hands its partitions off.
		ts.apply(&t)
		go func() {
			ts.waitStopped(ctx, t.Name)
			if err := ts.pushLatest(ctx, t.Name); err != nil {
				ts.logger.Error("push tenant account", "tenant", t.Name, "err", err)
			}
		}()
		return
	}
	if err := ts.pushLatest(ctx, t.Name); err != nil {
		ts.logger.Error("push tenant account", "tenant", t.Name, "err", err)
	}
	ts.apply(&t)
}

// remember keeps t, stored at revision rev, as the tenant's latest record
// unless a later revision is known; it reports whether t is the latest.
func (ts *tenantSet) remember(t *auth.Tenant, rev uint64) bool {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	st := ts.stateLocked(t.Name)
	if rev < st.rev {
		return false
	}
	st.rec, st.rev = t, rev
	return true
}

// stateLocked returns tenant name's state, made when missing.
// REQUIRES: ts.mu held.
func (ts *tenantSet) stateLocked(name string) *tenantState {
	st := ts.mu.states[name]
	if st == nil {
		st = &tenantState{cut: make(chan struct{})}
		ts.mu.states[name] = st
	}
	return st
}

// pushLatest pushes the account JWT of tenant name's latest record.
// Pushes are serialized, so the last one pushed is of the latest record.
func (ts *tenantSet) pushLatest(ctx context.Context, name string) error {
	ts.pushMu.Lock()
	defer ts.pushMu.Unlock()
	ts.mu.Lock()
	var rec *auth.Tenant
	if st := ts.mu.states[name]; st != nil {
		rec = st.rec
	}
	ts.mu.Unlock()
	if rec == nil {
		return nil
	}
	return ts.pushAccount(ctx, rec)
}

// apply makes the running state match t: its state, its tokens, and a
// daemon running unless it is disabled.
func (ts *tenantSet) apply(t *auth.Tenant) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	st := ts.stateLocked(t.Name)
	if (t.Disabled && !st.disabled) || t.RevokedAt > st.revokedAt {
		close(st.cut) // ends every request the tenant has open
		st.cut = make(chan struct{})
	}
	st.disabled, st.revokedAt, st.moving = t.Disabled, t.RevokedAt, t.Moving
	live := make(map[string]auth.Credential, len(t.Tokens)+len(t.Creds))
	for _, h := range t.Tokens {
		live[h] = auth.Credential{Name: auth.LegacyCredName, Role: auth.RoleWriter, Token: h}
	}
	for _, c := range t.Creds {
		if c.Token != "" && c.Revoked == 0 {
			live[c.Token] = c // expiry is checked on each request
		}
	}
	for h, c := range live {
		if _, ok := ts.mu.tokens[h]; !ok {
			ts.mu.tokens[h] = &tokenEntry{tenant: t.Name, cred: c, revoked: make(chan struct{})}
		}
	}
	for h, e := range ts.mu.tokens {
		if _, ok := live[h]; e.tenant == t.Name && !ok {
			close(e.revoked)
			delete(ts.mu.tokens, h)
		}
	}
	run, running := ts.mu.runs[t.Name]
	switch {
	case ts.mu.ctx == nil || ts.mu.ctx.Err() != nil:
		return
	case (t.Disabled || t.Moving) && running:
		ts.stopLocked(run)
		return
	case t.Disabled || t.Moving || running:
		return
	}
	run, err := ts.newRun(t)
	if err != nil {
		ts.logger.Error("tenant daemon; retrying", "tenant", t.Name, "err", err, "in", tenantRetry)
		time.AfterFunc(tenantRetry, func() { ts.reapply(t.Name) })
		return
	}
	ts.mu.runs[t.Name] = run
	st.stopErr = nil
	ctx, cancel := context.WithCancel(ts.mu.ctx)
	run.cancel = cancel
	ts.wg.Add(1)
	go func() {
		defer ts.wg.Done()
		run.err = run.d.Run(ctx)
		if run.err != nil {
			ts.logger.Error("tenant daemon stopped", "tenant", run.name, "err", run.err)
		}
		close(run.done)
		if ctx.Err() != nil {
			return // disabled (stopLocked takes over) or the node stops
		}
		// It stopped on its own (its JetStream never answered, say): a new
		// daemon is started after tenantRetry, so the tenant heals once the
		// cause is gone, without a restart of the node.
		ts.mu.Lock()
		if ts.mu.runs[run.name] == run {
			delete(ts.mu.runs, run.name)
		}
		ts.stateLocked(run.name).stopErr = cmp.Or(run.err, errors.New("it returned"))
		ts.mu.Unlock()
		ts.logger.Warn("tenant daemon; retrying", "tenant", run.name, "in", tenantRetry)
		time.AfterFunc(tenantRetry, func() { ts.reapply(run.name) })
	}()
}

// stopLocked stops a disabled (or moving) tenant's daemon; once it returned, the
// tenant's last record is applied again (it may have been enabled
// meanwhile: its new daemon must not open the data dir before the old one
// closed it). REQUIRES: ts.mu held.
func (ts *tenantSet) stopLocked(run *tenantRun) {
	if run.cancel == nil {
		return
	}
	cancel := run.cancel
	run.cancel = nil
	ts.logger.Info("tenant disabled or moving into shards: stopping its daemon", "tenant", run.name)
	cancel()
	go func() {
		<-run.done
		ts.mu.Lock()
		if ts.mu.runs[run.name] == run {
			delete(ts.mu.runs, run.name)
		}
		ts.mu.Unlock()
		ts.reapply(run.name)
	}()
}

// budget returns the spend limits of tenant name's latest record: a
// tenant's daemon reads them before every model call, so tenant create
// changes them for the running daemons (this node's record is the
// registry's, through its watch).
func (ts *tenantSet) budget(name string) auth.Budget {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if st := ts.mu.states[name]; st != nil && st.rec != nil {
		return st.rec.Budget
	}
	return auth.Budget{}
}

// reapply applies the last record of tenant name again.
func (ts *tenantSet) reapply(name string) {
	ts.mu.Lock()
	st := ts.mu.states[name]
	ts.mu.Unlock()
	if st != nil && st.rec != nil {
		ts.apply(st.rec)
	}
}

// newRun builds the daemon of tenant t: the parent's config, its own data
// dir, an in-process connection as agentd's user in t's account (and one
// as agentd's replier there, which answers t's clients), and its
// own metrics registry whose series carry tenant=<name>.
func (ts *tenantSet) newRun(t *auth.Tenant) (*tenantRun, error) {
	user, err := ts.op.Keys.TenantRuntimeUser(t)
	if err != nil {
		return nil, err
	}
	replier, err := ts.op.Keys.TenantReplierUser(t)
	if err != nil {
		return nil, err
	}
	pc := ts.parent.Config()
	cfg := pc
	cfg.DataDir = filepath.Join(pc.DataDir, agentd.TenantsSubdir, t.Name)
	cfg.PebbleFS = nil
	// The node's server is clustered, not the tenant's connection to it;
	// TLS and creds are the node's, not the tenant daemon's (which keeps
	// TLS to reach an external server).
	cfg.ClusterName, cfg.ClusterListen, cfg.Routes = "", "", nil
	cfg.NATSCreds = ""
	if ts.deps.Server != nil {
		cfg.NATSURL = agentd.InProcessURL(ts.deps.Server)
		cfg.TLSCert, cfg.TLSKey, cfg.TLSCA = "", "", ""
	}
	cfg.Auth, cfg.Insecure = false, true
	cfg.OIDCIssuer, cfg.OIDCAudience = "", ""
	// A new tenant's log takes the node's layout (its shards, and owned
	// views as the node has them); one that exists keeps its stored count
	// (0 here: the count the tenant's account stored). Its account's
	// stream limit has room for the shards (pushAccount), its clients'
	// permissions take any of its chunks streams (auth.ClientPermissions,
	// checked by the forwarder: startJSAPI) and its usage sums the shards.
	cfg.Shards = 0
	name := t.Name
	cfg.Tenant = &agentd.TenantLink{Name: t.Name, Server: ts.deps.Server, User: user, Replier: replier,
		Budget: func() auth.Budget { return ts.budget(name) }, Shards: ts.newShards()}
	tenant := t.Name
	cfg.Quota = pc.TenantQuota(t.Quota)
	cfg.AuditCommand = func(ctx context.Context, agent, verb string, err error) {
		ts.auditCommand(ctx, tenant, agent, verb, err)
	}
	cfg.CommandActor = func(h nats.Header) (auth.Identity, bool) {
		return ts.commandActor(tenant, h)
	}
	reg := prometheus.NewRegistry()
	cfg.Registerer = prometheus.WrapRegistererWith(prometheus.Labels{"tenant": t.Name}, reg)
	cfg.Gatherer = reg
	cfg.Logger = pc.Logger.With("tenant", t.Name)
	d, err := agentd.New(cfg)
	if err != nil {
		return nil, err
	}
	if err := d.OnStart(func(_ context.Context, deps *agentd.Deps) error { return startJSAPI(d, deps) }); err != nil {
		return nil, err
	}
	if err := ts.setup(d); err != nil {
		return nil, fmt.Errorf("wire tenant %s: %w", t.Name, err)
	}
	return &tenantRun{name: t.Name, d: d, reg: reg, done: make(chan struct{})}, nil
}

// markReady closes ts.ready once every tenant daemon started so far is
// ready or has stopped (a tenant that cannot start is logged and retried;
// it does not hold the node's readiness), or after tenantStartTimeout.
func (ts *tenantSet) markReady(ctx context.Context) {
	defer close(ts.ready)
	ts.mu.Lock()
	names := make([]string, 0, len(ts.mu.runs))
	for name := range ts.mu.runs {
		names = append(names, name)
	}
	ts.mu.Unlock()
	wctx, cancel := context.WithTimeout(ctx, tenantStartTimeout)
	defer cancel()
	for _, name := range names {
		if err := ts.waitReady(wctx, name); err != nil {
			ts.logger.Warn("tenant not ready at start", "tenant", name, "err", err)
		}
	}
}

// errStopped marks the answer of a wait whose daemon stopped on its own.
var errStopped = errors.New("its daemon stopped")

// daemonStopped is the answer of a wait for tenant name whose daemon
// stopped on its own with err (and is started again).
func daemonStopped(name string, err error) error {
	return host.ErrUnavailable.Wrapf("tenant %s: %w: %w (it is started again every %s)", name, errStopped, err, tenantRetry)
}

// waitThroughStops is waitReady past stops of the daemon, for a tenant
// just created: its daemon is started again after tenantRetry, and the
// wait goes on until one is ready, ctx ends, or 3 tenantRetry passed
// since the first stop, so a daemon that cannot start is answered within
// a client's request time. Any other answer (a diagnosis that the account
// has no JetStream) ends it at once. A new tenant's account can reach
// this node's server a moment after its claims update was answered: a CI
// run's TestCluster/Backup saw the daemon's first connections answered
// "JetStream not enabled for account", then "Authorization Violation",
// and the create failed with 503 where the daemon started again 5 s
// later.
func (ts *tenantSet) waitThroughStops(ctx context.Context, name string) error {
	var until time.Time // set at the first stop
	return backoff.Retry(ctx, 100*time.Millisecond, 100*time.Millisecond, func(err error) bool {
		if !errors.Is(err, errStopped) || ts.disabled(name) {
			return false
		}
		if until.IsZero() {
			until = time.Now().Add(3 * tenantRetry)
		}
		return time.Now().Before(until)
	}, func() error { return ts.waitReady(ctx, name) })
}

// disabled reports whether tenant name is disabled.
func (ts *tenantSet) disabled(name string) bool {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	st := ts.mu.states[name]
	return st != nil && st.disabled
}

// waitReady waits until tenant name's daemon is ready, it stopped, or ctx
// ends. Once the daemon has been not ready for jsDiagAfter, the server is
// asked whether the tenant's account has JetStream at all: when it says
// twice in a row that it has none, waitReady returns that reason at once
// rather than time out (see jsDiagnose).
func (ts *tenantSet) waitReady(ctx context.Context, name string) error {
	ts.mu.Lock()
	run := ts.mu.runs[name]
	var rec *auth.Tenant
	var stopped error // the daemon stopped on its own, and is started again
	if st := ts.mu.states[name]; st != nil {
		rec = st.rec
		if !st.disabled && st.stopErr != nil {
			stopped = daemonStopped(name, st.stopErr)
		}
	}
	ts.mu.Unlock()
	switch {
	case run == nil && stopped != nil:
		return stopped
	case run == nil:
		return host.ErrUnavailable.Wrapf("tenant %s has no daemon on this node (is it disabled?)", name)
	}
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	nextDiag := time.Now().Add(jsDiagAfter)
	var noJS error // the last diagnosis; a second one in a row ends the wait
	for {
		select {
		case <-run.done:
			if run.err != nil && !ts.disabled(name) {
				return daemonStopped(name, run.err)
			}
			return fmt.Errorf("tenant %s stopped: %w", name, run.err)
		case <-ctx.Done():
			if noJS != nil {
				return noJS
			}
			return host.ErrUnavailable.Wrapf("tenant %s not ready: %w", name, ctx.Err())
		case <-t.C:
			select {
			case <-run.d.Started():
				if run.d.Ready() {
					return nil
				}
			default:
			}
			if time.Now().Before(nextDiag) {
				continue
			}
			nextDiag = time.Now().Add(jsDiagEvery)
			err := ts.jsDiagnose(ctx, rec)
			if err != nil && noJS != nil {
				return err
			}
			noJS = err
		}
	}
}

// pushAccount sends t's account JWT to the server's resolver, the way nsc
// pushes one: a claims update request from the system account.
func (ts *tenantSet) pushAccount(ctx context.Context, t *auth.Tenant) error {
	tok, err := ts.op.Keys.TenantAccountJWT(t, ts.accountLimits(t.Quota, t.Moving))
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	msg, err := ts.sys.RequestWithContext(ctx, "$SYS.REQ.CLAIMS.UPDATE", []byte(tok))
	if err != nil {
		return fmt.Errorf("%w: account update: %w", agentd.ErrNATS, err)
	}
	var resp struct {
		Error *struct {
			Description string `json:"description"`
		} `json:"error"`
	}
	if err := json.Unmarshal(msg.Data, &resp); err != nil {
		return fmt.Errorf("account update: bad reply: %w", err)
	}
	if resp.Error != nil {
		return fmt.Errorf("account update: %s", resp.Error.Description)
	}
	return nil
}

// accountLimits are the JetStream and connection limits of the account
// of a tenant whose record holds q: its quota as the node resolves it
// (TenantQuota), with room in the streams limit for the shards of a
// sharded log past one of each kind (quota.ShardStreams), so the streams
// quota counts a tenant's log as two streams (events, chunks) however
// many shards it has. A tenant's clients create no stream (their
// permissions, auth.ClientPermissions): the limit bounds agentd's own.
// While the tenant's log moves into shards (moving), the copy holds the
// log twice: the unsharded pair stays beside the new shards (2 more
// streams), and the bytes limit is doubled; the move's reader of each
// stream is one more consumer (moveRoom).
func (ts *tenantSet) accountLimits(q auth.Quota, moving bool) auth.Quota {
	q = ts.parent.Config().TenantQuota(q)
	if q.Streams > 0 {
		q.Streams += int64(quota.ShardStreams(ts.parent.Shards()))
	}
	if moving {
		q = moveRoom(q)
	}
	return q
}

// Gather gathers every tenant daemon's metrics (labelled tenant=<name>).
func (ts *tenantSet) Gather() ([]*dto.MetricFamily, error) {
	if ts == nil {
		return nil, nil
	}
	ts.mu.Lock()
	gs := make(prometheus.Gatherers, 0, len(ts.mu.runs))
	for _, r := range ts.mu.runs {
		gs = append(gs, r.reg)
	}
	ts.mu.Unlock()
	return gs.Gather()
}

// running counts the tenant daemons started and not stopped.
func (ts *tenantSet) running() int {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	n := 0
	for _, r := range ts.mu.runs {
		select {
		case <-r.done:
		default:
			n++
		}
	}
	return n
}
