package modellimit

import (
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/forever-agents/forever/chat/llm"
)

// Limiter shares the rate limits of a node's models between its tenants
// (see the package doc). It is safe for concurrent use.
type Limiter struct {
	cfg     Config
	m       *metrics
	shareFn atomic.Pointer[func() float64] // SetShare's, else cfg.Share

	mu struct {
		sync.Mutex
		models  map[string]*model
		tenants map[string]*Tenant
		pauses  []Pause
	}
}

// Pause is one hold of a model's calls after a provider's rate-limited
// answer, as the limiter recorded it (Limiter.Pauses).
type Pause struct {
	Model string
	// At is when the answer came; Until when calls go again.
	At, Until time.Time
	// RetryAfter is what the provider asked for; 0 when it named nothing
	// and the limiter's backoff chose Until.
	RetryAfter time.Duration
}

// maxPauses bounds the pauses Limiter.Pauses keeps.
const maxPauses = 64

// New returns a limiter of cfg's bounds.
func New(cfg Config) (*Limiter, error) {
	cfg.ensureDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	l := &Limiter{cfg: cfg, m: m}
	l.mu.models = map[string]*model{}
	l.mu.tenants = map[string]*Tenant{}
	return l, nil
}

// Tenant returns the handle of the tenant name with weight (below 1: 1),
// the same one for the same name; a later call sets the weight.
func (l *Limiter) Tenant(name string, weight int) *Tenant {
	weight = max(weight, 1)
	l.mu.Lock()
	defer l.mu.Unlock()
	t, ok := l.mu.tenants[name]
	if !ok {
		t = &Tenant{l: l, name: name}
		l.mu.tenants[name] = t
	}
	t.weight = float64(weight)
	if !ok {
		// The series exist before the first call, for increase() and rate().
		l.m.granted.WithLabelValues(name)
		l.m.tokens.WithLabelValues(name)
		l.m.waiting.WithLabelValues(name)
		l.m.wait.WithLabelValues(name)
	}
	return t
}

// Pauses returns the pauses of the models' calls recorded last, oldest
// first (at most 64). The caller owns the slice.
func (l *Limiter) Pauses() []Pause {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]Pause(nil), l.mu.pauses...)
}

// Tenant is one tenant's handle on a Limiter: its calls wait in its own
// queue and are let through in proportion to its weight.
type Tenant struct {
	l    *Limiter
	name string

	// Guarded by l.mu.
	weight float64
	stats  Stats
}

// Stats is what the limiter did for one tenant (Tenant.Stats).
type Stats struct {
	// Granted is the calls let through; Waiting those waiting now.
	Granted, Waiting int64
	// Throttled is the calls the provider answered rate limited.
	Throttled int64
	// Paused is the calls that waited for a Pause to end.
	Paused int64
	// Waited is the time the tenant's calls spent waiting, summed.
	Waited time.Duration
	// LastGrant is when the last call was let through.
	LastGrant time.Time
}

// Stats returns what the limiter did for t so far.
func (t *Tenant) Stats() Stats {
	t.l.mu.Lock()
	defer t.l.mu.Unlock()
	return t.stats
}

// Name returns the tenant's name.
func (t *Tenant) Name() string { return t.name }

// waiter is one call waiting in its tenant's queue.
type waiter struct {
	tenant  *Tenant
	tokens  float64
	ready   chan struct{} // closed when granted
	granted bool
	paused  bool // it waited for a pause
	grantAt time.Time
}

// Wait blocks until a call of model, estimated at tokens (input tokens;
// 0 when unknown), may start, and returns done, which the caller must
// call once when the call ends with its usage and error: the usage
// corrects the token estimate, and a rate-limited error (llm.RateLimited)
// pauses the model for everyone for its Retry-After. When ctx ends first,
// Wait returns its cause and the call never counts.
func (t *Tenant) Wait(ctx context.Context, model string, tokens int64) (done func(llm.Usage, error), err error) {
	l := t.l
	start := l.cfg.Clock.Now()
	w := &waiter{tenant: t, tokens: float64(max(tokens, 0)), ready: make(chan struct{})}
	l.mu.Lock()
	m := l.modelLocked(model, start)
	m.enqueueLocked(w, start)
	t.stats.Waiting++
	l.m.waiting.WithLabelValues(t.name).Inc()
	for {
		now := l.cfg.Clock.Now()
		l.dispatchLocked(m, now)
		if w.granted {
			break
		}
		wake := m.readyInLocked(now, l.share())
		l.mu.Unlock()
		var timer <-chan time.Time
		if wake > 0 {
			timer = l.cfg.Clock.After(wake)
		}
		select {
		case <-w.ready:
		case <-timer:
		case <-ctx.Done():
		}
		l.mu.Lock()
		if !w.granted && ctx.Err() != nil {
			m.removeLocked(w)
			t.stats.Waiting--
			l.m.waiting.WithLabelValues(t.name).Dec()
			// A head of line that leaves may let the next one go.
			l.dispatchLocked(m, l.cfg.Clock.Now())
			l.mu.Unlock()
			return nil, context.Cause(ctx)
		}
	}
	waited := w.grantAt.Sub(start)
	t.stats.Waiting--
	t.stats.Granted++
	t.stats.Waited += waited
	t.stats.LastGrant = w.grantAt
	if w.paused {
		t.stats.Paused++
	}
	l.mu.Unlock()
	l.m.waiting.WithLabelValues(t.name).Dec()
	l.m.granted.WithLabelValues(t.name).Inc()
	l.m.wait.WithLabelValues(t.name).Observe(waited.Seconds())
	var once sync.Once
	return func(u llm.Usage, err error) {
		once.Do(func() { l.done(m, w, u, err) })
	}, nil
}

// done settles a granted call: its real tokens against its estimate, and
// a rate-limited answer's pause.
func (l *Limiter) done(m *model, w *waiter, u llm.Usage, err error) {
	used := float64(u.InputTokens + u.OutputTokens)
	limited := llm.RateLimited(err)
	if limited {
		used = 0 // the provider did not run it
	}
	l.m.tokens.WithLabelValues(w.tenant.name).Add(used)
	now := l.cfg.Clock.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if used != w.tokens {
		diff := used - w.tokens
		m.tokens.take(diff)
		if q := m.queues[w.tenant]; q != nil {
			d := m.cost(diff, 0) / w.tenant.weight
			q.start, q.finish = q.start+d, q.finish+d
		}
	}
	if !limited {
		if err == nil {
			m.backoff = l.cfg.Backoff
		}
		return
	}
	w.tenant.stats.Throttled++
	ra := llm.RetryAfterOf(err)
	d := ra
	if d <= 0 {
		d = m.backoff
		m.backoff = min(2*m.backoff, l.cfg.MaxBackoff)
	}
	until := now.Add(d)
	l.m.throttled.WithLabelValues(m.name).Inc()
	if until.After(m.pausedUntil) {
		from := now
		if m.pausedUntil.After(now) {
			from = m.pausedUntil
		}
		l.m.paused.WithLabelValues(m.name).Add(until.Sub(from).Seconds())
		m.pausedUntil = until
	}
	// The provider's window is spent: nothing is let through in a burst
	// when the pause ends.
	m.calls.level = math.Min(m.calls.level, 0)
	l.mu.pauses = append(l.mu.pauses, Pause{Model: m.name, At: now, Until: until, RetryAfter: ra})
	if len(l.mu.pauses) > maxPauses {
		l.mu.pauses = l.mu.pauses[len(l.mu.pauses)-maxPauses:]
	}
	l.cfg.Logger.Info("model rate limited; pausing its calls for every tenant",
		"model", m.name, "tenant", w.tenant.name, "for", d, "retry_after", ra, "err", err)
}

// SetShare replaces Config.Share: share returns this node's part of the
// cluster's bounds, read at every refill. Safe to call at any time.
func (l *Limiter) SetShare(share func() float64) { l.shareFn.Store(&share) }

// ShareAmong makes this node's share 1 / the nodes nodes returns (at
// least one): the live nodes serving tenants, such as an ownership
// manager's Nodes.
func (l *Limiter) ShareAmong(nodes func() []string) {
	l.SetShare(func() float64 { return 1 / float64(max(1, len(nodes()))) })
}

// share is the node's part of the cluster's bounds, in (0, 1].
func (l *Limiter) share() float64 {
	f := l.cfg.Share
	if p := l.shareFn.Load(); p != nil {
		f = *p
	}
	if f == nil {
		return 1
	}
	s := f()
	if s <= 0 || s > 1 || math.IsNaN(s) {
		return 1
	}
	return s
}

// modelLocked returns the state of model, made on first use.
// REQUIRES: l.mu held.
func (l *Limiter) modelLocked(name string, now time.Time) *model {
	if m, ok := l.mu.models[name]; ok {
		return m
	}
	burst := func(r Rate) float64 {
		return math.Max(1, r.PerSecond()*l.share()*l.cfg.Burst.Seconds())
	}
	m := &model{
		name:    name,
		calls:   newBucket(l.cfg.Calls.PerSecond(), burst(l.cfg.Calls), now),
		tokens:  newBucket(l.cfg.Tokens.PerSecond(), burst(l.cfg.Tokens), now),
		backoff: l.cfg.Backoff,
		queues:  map[*Tenant]*queue{},
	}
	l.mu.models[name] = m
	l.m.throttled.WithLabelValues(name)
	l.m.paused.WithLabelValues(name)
	return m
}

// dispatchLocked lets through the calls of m that may go at now, in
// fair order. REQUIRES: l.mu held.
func (l *Limiter) dispatchLocked(m *model, now time.Time) {
	share := l.share()
	m.calls.refill(now, m.calls.rate*share)
	m.tokens.refill(now, m.tokens.rate*share)
	for !now.Before(m.pausedUntil) {
		q := m.nextLocked()
		if q == nil {
			return
		}
		w := q.waiters[0]
		if !m.calls.has(1) || !m.tokens.has(w.tokens) {
			// The fair next one waits, and everyone behind it: a small
			// call never overtakes a tenant owed its turn.
			return
		}
		m.calls.take(1)
		m.tokens.take(w.tokens)
		q.waiters = q.waiters[1:]
		m.vnow = q.start
		q.finish = q.start + m.cost(w.tokens, 1)/w.tenant.weight
		q.start = q.finish
		w.granted, w.grantAt = true, now
		close(w.ready)
	}
	for _, q := range m.queues {
		for _, w := range q.waiters {
			w.paused = true
		}
	}
}

// model is one model's bounds and its tenants' queues.
type model struct {
	name          string
	calls, tokens bucket
	pausedUntil   time.Time
	backoff       time.Duration // the next pause without a Retry-After
	// vnow is the virtual time: the start tag of the last call let
	// through. A tenant that was idle starts again from it, so idleness
	// earns no credit.
	vnow   float64
	queues map[*Tenant]*queue
}

// queue is one tenant's waiting calls of a model, FIFO.
type queue struct {
	waiters []*waiter
	// start is the virtual start tag of the head of line, finish the
	// finish tag of the tenant's last call let through.
	start, finish float64
}

// cost is how much of the model's bounds a call of tokens and calls
// uses, in seconds of the binding bound: the larger of its share of the
// calls' rate and of the tokens' rate. Without bounds, one per call.
func (m *model) cost(tokens float64, calls float64) float64 {
	c, t := m.calls.rate, m.tokens.rate
	switch {
	case c <= 0 && t <= 0:
		return calls
	case t <= 0:
		return calls / c
	case c <= 0:
		return tokens / t
	}
	return math.Max(calls/c, tokens/t)
}

// enqueueLocked queues w in its tenant's queue. REQUIRES: l.mu held.
func (m *model) enqueueLocked(w *waiter, now time.Time) {
	q := m.queues[w.tenant]
	if q == nil {
		q = &queue{}
		m.queues[w.tenant] = q
	}
	if len(q.waiters) == 0 {
		// Back from idle: no credit for the time it used nothing.
		q.start = math.Max(q.finish, m.vnow)
	}
	q.waiters = append(q.waiters, w)
}

// removeLocked takes w (not granted) out of its queue. REQUIRES: l.mu
// held.
func (m *model) removeLocked(w *waiter) {
	q := m.queues[w.tenant]
	if q == nil {
		return
	}
	for i, x := range q.waiters {
		if x == w {
			q.waiters = append(q.waiters[:i], q.waiters[i+1:]...)
			return
		}
	}
}

// nextLocked is the queue whose head goes next: the least finish tag
// its head would get, ties to the tenant's name. REQUIRES: l.mu held.
func (m *model) nextLocked() *queue {
	var best *queue
	var bestTag float64
	var bestName string
	for t, q := range m.queues {
		if len(q.waiters) == 0 {
			continue
		}
		tag := q.start + m.cost(q.waiters[0].tokens, 1)/t.weight
		if best == nil || tag < bestTag || (tag == bestTag && t.name < bestName) {
			best, bestTag, bestName = q, tag, t.name
		}
	}
	return best
}

// readyInLocked is how long until the next call of m may go, at least a
// millisecond. REQUIRES: l.mu held.
func (m *model) readyInLocked(now time.Time, share float64) time.Duration {
	var d time.Duration
	if now.Before(m.pausedUntil) {
		d = m.pausedUntil.Sub(now)
	}
	if q := m.nextLocked(); q != nil {
		d = max(d, m.calls.readyIn(1, m.calls.rate*share), m.tokens.readyIn(q.waiters[0].tokens, m.tokens.rate*share))
	}
	return max(d, time.Millisecond)
}

// String describes the limiter's bounds, for logs.
func (l *Limiter) String() string {
	return fmt.Sprintf("calls %s, tokens %s", l.cfg.Calls, l.cfg.Tokens)
}
