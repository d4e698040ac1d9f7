package ownership

import (
	"context"
	"time"
)

// watcher keeps one watch of the lease bucket running for Run: it
// restarts a watch that ended with an error after RenewEvery, and one that
// lags this node's own heartbeat at once.
//
// Why the lag check: a KV watch is an ordered consumer, which lives on one
// server. When that server dies, the watch delivers nothing until the
// client library notices missing heartbeats, which took 19 s in a 3-node
// cluster (TestWatchOutlivesItsServer). Meanwhile no renewal of anyone is
// seen, so nothing can be judged stale (staleLocked), and a dead node's
// leases wait. A heartbeat of this node that the server acknowledged but
// the watch has not delivered after watchLag says the watch is broken
// while the bucket works.
//
// A watcher is used by Run's goroutine only.
type watcher struct {
	m     *Manager
	ctx   context.Context // Run's watch context: ends every watch
	ends  chan watchEnd
	retry <-chan time.Time // a restart after an error, when due

	gen     int // the running watch's generation
	cancel  context.CancelFunc
	started time.Time
}

// watchEnd is how a watch ended: err is nil when it was cancelled.
type watchEnd struct {
	gen int
	err error
}

func newWatcher(m *Manager, ctx context.Context) *watcher {
	return &watcher{m: m, ctx: ctx, ends: make(chan watchEnd, 4)}
}

// lag is how long an acknowledged heartbeat may go undelivered before the
// watch counts as broken: far above a live watch's delivery (under a
// millisecond on loopback), far below a TTL.
func (w *watcher) lag() time.Duration { return max(w.m.cfg.RenewEvery/2, 250*time.Millisecond) }

// start cancels the running watch, if any, and starts another; synced, if
// not nil, is closed once the bucket's current keys are in.
func (w *watcher) start(synced chan struct{}) {
	if w.cancel != nil {
		w.cancel()
	}
	if synced == nil {
		synced = make(chan struct{})
	}
	w.gen++
	gen := w.gen
	w.m.mu.Lock()
	w.m.mu.watchGen = gen // from now on, what the replaced watch delivers is dropped
	w.m.mu.Unlock()
	ctx, cancel := context.WithCancel(w.ctx)
	w.cancel, w.started, w.retry = cancel, time.Now(), nil
	go func() {
		err := w.m.watch(ctx, gen, synced)
		w.ends <- watchEnd{gen: gen, err: err}
	}()
}

// ended takes a watch's end: one this watcher replaced, or one ended by
// Run stopping, is nothing; another is made again after RenewEvery.
func (w *watcher) ended(end watchEnd) {
	if end.gen != w.gen || w.ctx.Err() != nil {
		return
	}
	w.m.log.Error("lease watcher stopped; restarting it", "err", end.err)
	w.retry = time.After(w.m.cfg.RenewEvery)
}

// checkLag restarts a watch that lags an acknowledged heartbeat, at most
// once a RenewEvery.
func (w *watcher) checkLag() {
	now := time.Now()
	if w.retry != nil || now.Sub(w.started) < w.m.cfg.RenewEvery {
		return
	}
	m := w.m
	m.mu.Lock()
	behind := m.mu.beatAcked > m.mu.ownSeen && now.Sub(m.mu.beatAckedAt) > w.lag()
	acked, seen := m.mu.beatAcked, m.mu.ownSeen
	m.mu.Unlock()
	if !behind {
		return
	}
	m.log.Warn("lease watcher lags this node's heartbeat; restarting it",
		"acked", acked, "seen", seen, "lag", w.lag())
	m.met.watchRestarts.Inc()
	w.start(nil)
}
