package quota

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/forever-agents/forever/auth"
	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/internal/apierror"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"
)

// Error is a request refused because its tenant is over a quota: 429
// with Retry-After over HTTP, code 429 over NATS. Nothing was written.
type Error struct {
	Quota string        // "rate", "agents", "turns" or "bytes"
	Limit float64       // the quota
	Retry time.Duration // when a retry may succeed (0: after usage drops)
}

func (e *Error) Error() string { return "agentd: " + e.sentence() }

// sentence is what the client reads.
func (e *Error) sentence() string {
	switch e.Quota {
	case "rate":
		return fmt.Sprintf("over quota: more than %g requests per second, retry in %s", e.Limit, e.Retry.Round(time.Millisecond))
	case "bytes":
		return fmt.Sprintf("over quota: the tenant's stored bytes and this command's would exceed its limit of %d bytes", int64(e.Limit))
	}
	return fmt.Sprintf("over quota: the tenant has %d %s running or stored, its limit", int64(e.Limit), e.Quota)
}

// APIError is the 429 a client reads, with its Retry-After.
func (e *Error) APIError() *apierror.Error {
	return apierror.New(apierror.OverQuota, "%s", e.sentence()).WithRetryAfter(e.RetryAfter()).WithCause(e)
}

// StatusCode is 429.
func (e *Error) StatusCode() int { return http.StatusTooManyRequests }

// RetryAfter is the Retry-After to send, at least a second.
func (e *Error) RetryAfter() time.Duration { return max(e.Retry, time.Second) }

// RetryAfterSeconds is d as a Retry-After value (whole seconds, at least 1).
func RetryAfterSeconds(d time.Duration) string {
	return fmt.Sprint(max(1, int64(math.Ceil(d.Seconds()))))
}

// Enforcer enforces a tenant's auth.Quota in its daemon's host, before a
// command writes anything: the request rate, the number of agents (an
// agent is counted from its first write command), and the bytes stored
// (the account's JetStream usage, which the server also enforces on every
// write). Concurrent turns are bounded by the chat type's turn limiter
// (Quota().Turns). A zero quota is no limit. A nil *Enforcer allows
// everything.
type Enforcer struct {
	q       auth.Quota
	limiter *rate.Limiter       // nil without a rate quota
	js      jetstream.JetStream // set by Bind once connected
	prefix  string
	refused *prometheus.CounterVec

	mu struct {
		sync.Mutex
		agents    map[string]bool // nil until loaded
		usage     jetstream.AccountInfo
		usageTime time.Time
	}
}

// New returns the enforcer of q, registering its metrics on reg. Call Bind
// before Admit.
func New(q auth.Quota, reg prometheus.Registerer) (*Enforcer, error) {
	qs := &Enforcer{q: q, prefix: eventlog.DefaultPrefix}
	if q.Rate > 0 {
		burst := q.Burst
		if burst <= 0 {
			burst = max(1, int(math.Ceil(q.Rate)))
		}
		qs.limiter = rate.NewLimiter(rate.Limit(q.Rate), burst)
	}
	qs.refused = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "forever_quota_refused_total",
		Help: "Requests refused with 429 because the tenant is over a quota, by quota.",
	}, []string{"quota"})
	agents := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "forever_quota_agents",
		Help: "Agents of the tenant counted against its agents quota.",
	}, func() float64 {
		qs.mu.Lock()
		defer qs.mu.Unlock()
		return float64(len(qs.mu.agents))
	})
	stored := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "forever_quota_stored_bytes",
		Help: "Bytes the tenant stores in JetStream, as last read for its bytes quota.",
	}, func() float64 {
		qs.mu.Lock()
		defer qs.mu.Unlock()
		return float64(qs.mu.usage.Store)
	})
	limits := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "forever_quota_limit",
		Help: "The tenant's quotas (0: no limit).",
	}, []string{"quota"})
	limits.WithLabelValues("rate").Set(q.Rate)
	limits.WithLabelValues("agents").Set(float64(q.Agents))
	limits.WithLabelValues("turns").Set(float64(q.Turns))
	limits.WithLabelValues("bytes").Set(float64(q.Bytes))
	for _, c := range []prometheus.Collector{qs.refused, agents, stored, limits} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return qs, nil
}

// Bind gives the enforcer the tenant's JetStream, which it reads the
// account's usage and the agents from. The daemon calls it once connected.
func (qs *Enforcer) Bind(js jetstream.JetStream) { qs.js = js }

// Quota returns the quota enforced.
func (qs *Enforcer) Quota() auth.Quota {
	if qs == nil {
		return auth.Quota{}
	}
	return qs.q
}

// WriteCost is what Admit counts a write command of size payload bytes
// as storing: its payload twice (a chat stores the message, and the
// request again in its turn's start) and 4 KiB of records around them.
// What the turn writes next (its reply, its end) fits in the room the
// account's server limit keeps above the quota (auth.Quota.StoreLimit).
func WriteCost(payload int) int64 { return 2*int64(payload) + 4<<10 }

// Admit refuses the command verb of agent, whose payload is size bytes,
// with an *Error when it would go over a quota: the bytes quota when the
// tenant's stored bytes plus WriteCost(size) exceed it, so a command is
// refused before it stores anything rather than stopped halfway. The rate
// quota is Allow's, at the entry points (a NATS command, an HTTP request),
// so a request is counted once.
func (qs *Enforcer) Admit(ctx context.Context, agent, verb string, size int) error {
	if qs == nil || auth.IsRead(verb) {
		// A read writes nothing: only the rate quota applies, and an
		// agent it names is not counted.
		return nil
	}
	if qs.q.Bytes > 0 {
		used, err := qs.stored(ctx)
		if err != nil {
			return err
		}
		if used+WriteCost(size) > qs.q.Bytes {
			return qs.refuse(&Error{Quota: "bytes", Limit: float64(qs.q.Bytes)})
		}
	}
	if qs.q.Agents > 0 {
		if err := qs.admitAgent(ctx, agent); err != nil {
			return err
		}
	}
	return nil
}

// Allow takes one request from the rate quota. A nil Enforcer allows all.
func (qs *Enforcer) Allow() error {
	if qs == nil || qs.limiter == nil {
		return nil
	}
	r := qs.limiter.Reserve()
	if d := r.Delay(); d > 0 {
		r.Cancel()
		return qs.refuse(&Error{Quota: "rate", Limit: qs.q.Rate, Retry: d})
	}
	return nil
}

func (qs *Enforcer) refuse(e *Error) error {
	qs.refused.WithLabelValues(e.Quota).Inc()
	return e
}

// admitAgent counts agent, refusing a new one past the quota. The count
// starts from the agents with events in the log.
func (qs *Enforcer) admitAgent(ctx context.Context, agent string) error {
	qs.mu.Lock()
	loaded := qs.mu.agents != nil
	qs.mu.Unlock()
	if !loaded {
		known, err := qs.loadAgents(ctx)
		if err != nil {
			return err
		}
		qs.mu.Lock()
		if qs.mu.agents == nil {
			qs.mu.agents = known
		}
		qs.mu.Unlock()
	}
	qs.mu.Lock()
	defer qs.mu.Unlock()
	if qs.mu.agents[agent] {
		return nil
	}
	if len(qs.mu.agents) >= qs.q.Agents {
		return qs.refuse(&Error{Quota: "agents", Limit: float64(qs.q.Agents)})
	}
	qs.mu.agents[agent] = true
	return nil
}

// loadAgents lists the agents with events: the subjects of the events
// stream, one per agent.
//
// A sharded log (eventlog's shards) has an events stream per shard, on
// subjects <prefix>.evt.<partition>.<agent>: every shard's subjects are
// listed.
func (qs *Enforcer) loadAgents(ctx context.Context) (map[string]bool, error) {
	streams, sharded, err := eventsStreams(ctx, qs.js)
	if err != nil {
		return nil, unavailable("agents quota", err)
	}
	filter := qs.prefix + ".evt.*"
	if sharded {
		filter = qs.prefix + ".evt.*.*"
	}
	known := map[string]bool{}
	for _, s := range streams {
		info, err := s.Info(ctx, jetstream.WithSubjectFilter(filter))
		if err != nil {
			return nil, unavailable("agents quota", err)
		}
		for subj := range info.State.Subjects {
			known[subj[strings.LastIndexByte(subj, '.')+1:]] = true
		}
	}
	return known, nil
}

// stored returns the account's JetStream file usage, read at most once a
// second.
func (qs *Enforcer) stored(ctx context.Context) (int64, error) {
	qs.mu.Lock()
	fresh := time.Since(qs.mu.usageTime) < time.Second
	used := int64(qs.mu.usage.Store)
	qs.mu.Unlock()
	if fresh {
		return used, nil
	}
	info, err := qs.js.AccountInfo(ctx)
	if err != nil {
		return 0, unavailable("bytes quota", err)
	}
	qs.mu.Lock()
	qs.mu.usage, qs.mu.usageTime = *info, time.Now()
	qs.mu.Unlock()
	return int64(info.Store), nil
}

// JetStream's error codes for a write over the account's storage limit
// (the server's own enforcement of the bytes quota).
const (
	jsAccountResourcesExceeded = 10002
	jsStorageResourcesExceeded = 10047
)

// OverStorage turns the server's refusal of a write over the account's
// storage limit into the bytes quota's error; other errors are returned as
// they are.
func (qs *Enforcer) OverStorage(err error) error {
	if qs == nil || qs.q.Bytes == 0 || err == nil {
		return err
	}
	var apiErr *jetstream.APIError
	if (errors.As(err, &apiErr) && (apiErr.ErrorCode == jsAccountResourcesExceeded || apiErr.ErrorCode == jsStorageResourcesExceeded)) ||
		strings.Contains(err.Error(), "resource limits exceeded for account") {
		return qs.refuse(&Error{Quota: "bytes", Limit: float64(qs.q.Bytes)})
	}
	return err
}

// unavailableError is a quota that could not be checked because JetStream
// did not answer: 503, retry; nothing was written.
type unavailableError struct {
	what string
	err  error
}

func unavailable(what string, err error) error { return &unavailableError{what, err} }

func (e *unavailableError) Error() string {
	return "agentd: unavailable, retry: " + e.what + ": " + e.err.Error()
}

// APIError is the 503 a client reads: what could not be checked, and why.
func (e *unavailableError) APIError() *apierror.Error {
	return apierror.New(apierror.Unavailable, "%s: %v", e.what, e.err).WithCause(e)
}

func (e *unavailableError) Unwrap() error { return e.err }

// StatusCode is 503.
func (e *unavailableError) StatusCode() int { return http.StatusServiceUnavailable }
