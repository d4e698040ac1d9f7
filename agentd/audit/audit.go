package audit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"

	"github.com/forever-agents/forever/internal/leaderread"
)

// Stream and subjects of the audit log: forever.audit.<tenant>, or
// forever.audit._node for what concerns no tenant.
const (
	Stream        = "FOREVER_AUDIT"
	SubjectPrefix = "forever.audit"
	NodeSubject   = "_node"
)

// Defaults and bounds.
const (
	DefaultMaxAge   = 30 * 24 * time.Hour
	MaxDefaultBytes = 256 << 20
	QueueSize       = 4096
	// RefusalRate and RefusalBurst bound the refusals recorded for one
	// tenant from one source (the client's host); NodeRefusalRate and
	// NodeRefusalBurst all of them, so that many sources together cannot
	// push the other records out of the stream either.
	RefusalRate      = 20
	RefusalBurst     = 100
	NodeRefusalRate  = 10 * RefusalRate
	NodeRefusalBurst = 10 * RefusalBurst
	// MaxRefusalKeys bounds the (tenant, source) pairs whose refusals are
	// limited one by one; past it, the pairs idle long enough to have
	// their whole burst back are forgotten, and while none is, new pairs
	// share one limit.
	MaxRefusalKeys = 4096
)

// Outcomes of a Record.
const (
	OK      = "ok"
	Refused = "refused"
	Failed  = "failed"
)

// Record is one audit record.
type Record struct {
	Time time.Time `json:"time"`
	Node string    `json:"node"`
	// Who: the tenant, the credential's name ("admin" for the admin
	// credential, also on a NATS command it sent with its actor token,
	// "oidc:<subject>" for an OIDC token, "nats" for another NATS
	// command, whose credential the server checked but does not name) and
	// its role.
	Tenant string `json:"tenant,omitempty"`
	Cred   string `json:"cred,omitempty"`
	Role   string `json:"role,omitempty"`
	// What: the action (tenant.create, tenant.revoke, tenant.disable,
	// tenant.enable, tenant.token.revoke, tenant.access, admin.creds,
	// admin.token, restore, chat, approve, tool-result, state, cancel,
	// interrupt, delete, meta, auth.refused, quota.refused,
	// reply.refused, nats.denied, refusals.suppressed), its outcome
	// (ok, refused, failed), its status code and a one-line detail.
	Action  string `json:"action"`
	Outcome string `json:"outcome"`
	Code    int    `json:"code,omitempty"`
	Detail  string `json:"detail,omitempty"`
	// Agent is the agent a command was for.
	Agent string `json:"agent,omitempty"`
	// From is the client's address, when known (HTTP, NATS denials).
	From string `json:"from,omitempty"`
	// Suppressed counts the refusals left out since the last one
	// recorded.
	Suppressed int `json:"suppressed,omitempty"`
}

// Config configures a Log.
type Config struct {
	JS       jetstream.JetStream // agentd's own account
	Replicas int
	MaxAge   time.Duration // 0: DefaultMaxAge
	MaxBytes int64         // must be set
	Node     string        // this node's name, in every record
	Logger   *slog.Logger
	// Registerer receives the metrics; nil registers none.
	Registerer prometheus.Registerer
}

// Log appends records to the audit stream. Record and Refused are safe
// for concurrent use and never block; Run writes them until ctx ends.
type Log struct {
	cfg     Config
	queue   chan Record
	dropped prometheus.Counter
	supp    prometheus.Counter

	mu       sync.Mutex
	node     *rate.Limiter // every refusal's
	refusals map[refusalKey]*refusalBucket
	overflow refusalBucket // new pairs', while refusals is full
}

// refusalKey is whose refusals one limit counts: a tenant's ("" for the
// node's) from one source, the client's host ("" when unknown).
type refusalKey struct{ tenant, source string }

// refusalBucket limits one refusalKey's records and counts those left
// out since the last one recorded.
type refusalBucket struct {
	lim        *rate.Limiter
	suppressed int
}

// StreamConfig is the audit stream's configuration.
func StreamConfig(cfg Config) jetstream.StreamConfig {
	age := cfg.MaxAge
	if age == 0 {
		age = DefaultMaxAge
	}
	return jetstream.StreamConfig{
		Name:        Stream,
		Description: "Forever audit log (agentd/audit records)",
		Subjects:    []string{SubjectPrefix + ".>"},
		Storage:     jetstream.FileStorage,
		Replicas:    max(cfg.Replicas, 1),
		MaxAge:      age,
		MaxBytes:    cfg.MaxBytes,
		Discard:     jetstream.DiscardOld,
	}
}

// Open creates (or updates) the audit stream and returns its Log.
func Open(ctx context.Context, cfg Config) (*Log, error) {
	if cfg.JS == nil || cfg.MaxBytes <= 0 {
		return nil, errors.New("audit: Config.JS and MaxBytes are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if _, err := cfg.JS.CreateOrUpdateStream(ctx, StreamConfig(cfg)); err != nil {
		return nil, fmt.Errorf("audit: stream %s: %w", Stream, err)
	}
	l := &Log{
		cfg:      cfg,
		queue:    make(chan Record, QueueSize),
		node:     rate.NewLimiter(NodeRefusalRate, NodeRefusalBurst),
		refusals: map[refusalKey]*refusalBucket{},
		overflow: refusalBucket{lim: rate.NewLimiter(RefusalRate, RefusalBurst)},
		dropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "forever_audit_dropped_total",
			Help: "Audit records dropped because the queue to the audit stream was full.",
		}),
		supp: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "forever_audit_refusals_suppressed_total",
			Help: "Auth refusals not recorded one by one (past the audit log's refusal rate); the next one recorded counts them.",
		}),
	}
	if cfg.Registerer != nil {
		for _, c := range []prometheus.Collector{l.dropped, l.supp} {
			if err := cfg.Registerer.Register(c); err != nil {
				return nil, fmt.Errorf("audit: register metrics: %w", err)
			}
		}
	}
	return l, nil
}

// Record queues r for the stream, stamping its time and node. A nil Log
// records nothing.
func (l *Log) Record(r Record) {
	if l == nil {
		return
	}
	if r.Time.IsZero() {
		r.Time = time.Now().UTC()
	}
	r.Node = l.cfg.Node
	select {
	case l.queue <- r:
	default:
		l.dropped.Inc()
	}
}

// Refused records a refusal, at most RefusalRate a second for its tenant
// and source (Record.From's host) and NodeRefusalRate for the node; the
// ones left out are counted in the next one recorded for the same tenant
// and source, so one tenant's flood, or one client's, never hides
// another's refusals.
func (l *Log) Refused(r Record) {
	if l == nil {
		return
	}
	now := time.Now()
	key := refusalKey{r.Tenant, source(r.From)}
	l.mu.Lock()
	b := l.bucket(key, now)
	if !b.lim.AllowN(now, 1) || !l.node.AllowN(now, 1) {
		b.suppressed++
		l.mu.Unlock()
		l.supp.Inc()
		return
	}
	r.Suppressed, b.suppressed = b.suppressed, 0
	l.mu.Unlock()
	if r.Outcome == "" {
		r.Outcome = Refused
	}
	l.Record(r)
}

// bucket returns key's limit, making one; when MaxRefusalKeys are held,
// it first forgets the idle ones (their burst back whole), recording for
// each what it left out, and while none is idle, returns the overflow's.
// l.mu is held.
func (l *Log) bucket(key refusalKey, now time.Time) *refusalBucket {
	if b, ok := l.refusals[key]; ok {
		return b
	}
	if len(l.refusals) >= MaxRefusalKeys {
		for k, b := range l.refusals {
			if b.lim.TokensAt(now) < RefusalBurst {
				continue
			}
			delete(l.refusals, k)
			if b.suppressed > 0 {
				l.Record(Record{Tenant: k.tenant, From: k.source, Action: "refusals.suppressed", Outcome: Refused, Suppressed: b.suppressed})
			}
		}
		if len(l.refusals) >= MaxRefusalKeys {
			return &l.overflow
		}
	}
	b := &refusalBucket{lim: rate.NewLimiter(RefusalRate, RefusalBurst)}
	l.refusals[key] = b
	return b
}

// source is the host of a client's address (host:port), or the address
// as it is when it has no port.
func source(from string) string {
	if host, _, err := net.SplitHostPort(from); err == nil {
		return host
	}
	return from
}

// Subject is the subject of a record of tenant ("" for the node).
func Subject(tenant string) string {
	if tenant == "" {
		tenant = NodeSubject
	}
	return SubjectPrefix + "." + tenant
}

// Run writes the queued records to the stream until ctx ends, then the
// ones still queued (bounded by a few seconds). A write that fails is
// logged, at most once a minute, and the record dropped.
func (l *Log) Run(ctx context.Context) error {
	var lastErr time.Time
	write := func(ctx context.Context, r Record) {
		b, err := json.Marshal(r)
		if err == nil {
			wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			_, err = l.cfg.JS.Publish(wctx, Subject(r.Tenant), b)
			cancel()
		}
		if err != nil {
			l.dropped.Inc()
			if time.Since(lastErr) > time.Minute {
				lastErr = time.Now()
				l.cfg.Logger.Warn("audit record not stored", "action", r.Action, "tenant", r.Tenant, "err", err)
			}
		}
	}
	for {
		select {
		case r := <-l.queue:
			write(ctx, r)
		case <-ctx.Done():
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			for {
				select {
				case r := <-l.queue:
					write(dctx, r)
				default:
					return nil
				}
			}
		}
	}
}

// Tail reads the audit stream: the last n records (all with n <= 0) of
// tenant (every tenant when empty), then, with follow, the new ones until
// ctx ends. fn gets each record in order. Without follow the listing ends
// at the last record the stream's leader held when it began (see tailer).
func Tail(ctx context.Context, js jetstream.JetStream, tenant string, n int, follow bool, fn func(Record) error) error {
	return tail(ctx, js, tenant, n, follow, fn, nil)
}

// tail is Tail with the test hook delivered (see tailer).
func tail(ctx context.Context, js jetstream.JetStream, tenant string, n int, follow bool, fn func(Record) error, delivered func(*jetstream.MsgMetadata)) error {
	st, err := js.Stream(ctx, Stream)
	if err != nil {
		return fmt.Errorf("audit: stream %s: %w", Stream, err)
	}
	filter := SubjectPrefix + ".>"
	if tenant != "" {
		filter = Subject(tenant)
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(filter))
	if err != nil {
		return fmt.Errorf("audit: stream %s: %w", Stream, err)
	}
	var total uint64
	for _, c := range info.State.Subjects {
		total += c
	}
	if tenant == "" {
		total = info.State.Msgs
	}
	var skip uint64
	if n > 0 && total > uint64(n) {
		skip = total - uint64(n) // deliver all, print the last n
	}
	if total == 0 && !follow {
		return nil
	}
	t := &tailer{js: js, filter: filter, skip: skip, follow: follow, delivered: delivered}
	if !follow {
		if t.last, err = leaderread.Last(ctx, js, Stream, filter); err != nil {
			return fmt.Errorf("audit: read %s: %w", Stream, err)
		}
		if t.last == 0 {
			return nil // removed since the count
		}
	}
	return t.run(ctx, st, fn)
}

// tailer delivers the records on filter through an ordered consumer.
//
// Without follow it ends at last, the sequence of the last record the
// stream's leader held before the consumer started. The consumer may sit
// on a replica behind the leader, which says none pending before last: so
// none pending (or a second without a record) before last asks the leader
// for the next record after the one delivered (leaderread.Next); the
// listing ends only when the leader holds none up to last (records
// removed meanwhile: age, size), and otherwise waits for the replica to
// deliver it.
type tailer struct {
	js     jetstream.JetStream
	filter string
	skip   uint64 // records delivered but not given to fn: before the last n
	follow bool
	last   uint64 // without follow: the leader's last sequence on filter
	seen   uint64 // sequence of the last record delivered
	// delivered, when set (tests), sees each record's metadata before
	// the end rule reads it.
	delivered func(*jetstream.MsgMetadata)
}

func (t *tailer) run(ctx context.Context, st jetstream.Stream, fn func(Record) error) error {
	cons, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{t.filter}, DeliverPolicy: jetstream.DeliverAllPolicy})
	if err != nil {
		return fmt.Errorf("audit: read %s: %w", Stream, err)
	}
	for {
		msg, err := cons.Next(jetstream.FetchMaxWait(time.Second))
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			if errors.Is(err, jetstream.ErrNoMessages) || errors.Is(err, nats.ErrTimeout) || errors.Is(err, context.DeadlineExceeded) {
				// Nothing new yet: a listing ends if nothing is left up to last.
				if done, err := t.doneAfter(ctx, t.seen); done || err != nil {
					return err
				}
				continue
			}
			return fmt.Errorf("audit: read %s: %w", Stream, err)
		}
		md, err := msg.Metadata()
		if err != nil {
			return fmt.Errorf("audit: read %s: %w", Stream, err)
		}
		if t.delivered != nil {
			t.delivered(md)
		}
		t.seen = md.Sequence.Stream
		if t.skip > 0 {
			t.skip--
		} else {
			var r Record
			if err := json.Unmarshal(msg.Data(), &r); err == nil {
				if err := fn(r); err != nil {
					return err
				}
			}
		}
		if t.follow {
			continue
		}
		if t.seen >= t.last {
			return nil
		}
		if md.NumPending == 0 {
			if done, err := t.doneAfter(ctx, t.seen); done || err != nil {
				return err
			}
		}
	}
}

// doneAfter reports whether a listing (no follow) is done after the record
// at seen: the leader holds no record on the filter after it up to last.
func (t *tailer) doneAfter(ctx context.Context, seen uint64) (bool, error) {
	if t.follow {
		return false, nil
	}
	next, err := leaderread.Next(ctx, t.js, Stream, t.filter, seen+1)
	if err != nil {
		return false, fmt.Errorf("audit: read %s: %w", Stream, err)
	}
	return next == 0 || next > t.last, nil
}
