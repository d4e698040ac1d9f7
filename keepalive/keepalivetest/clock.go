// Package keepalivetest holds test helpers for code that uses keepalive: a
// fake Clock whose time moves only when the test says so.
package keepalivetest

import (
	"context"
	"sync"
	"time"

	"github.com/forever-agents/forever/keepalive"
)

// Clock is a fake keepalive.Clock. Time stands still until Advance or Set;
// timers whose deadline is reached fire then. It is safe for concurrent use.
type Clock struct {
	mu      sync.Mutex
	now     time.Time
	timers  map[*timer]struct{}
	changed chan struct{} // closed and replaced whenever the set of timers changes
}

var _ keepalive.Clock = (*Clock)(nil)

// NewClock returns a fake clock set to start.
func NewClock(start time.Time) *Clock {
	return &Clock{now: start, timers: map[*timer]struct{}{}, changed: make(chan struct{})}
}

// Now returns the fake time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// NewTimer returns a timer firing once the fake time reaches Now()+d.
func (c *Clock) NewTimer(d time.Duration) keepalive.Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &timer{c: c, ch: make(chan time.Time, 1), at: c.now.Add(d)}
	if d <= 0 {
		t.ch <- c.now
		return t
	}
	c.timers[t] = struct{}{}
	c.notifyLocked()
	return t
}

// Advance moves the time forward by d and fires the timers that are due.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.setLocked(c.now.Add(d))
}

// Set moves the time to t (never backwards) and fires the timers that are due.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t.After(c.now) {
		c.setLocked(t)
	}
}

// REQUIRES: c.mu held.
func (c *Clock) setLocked(t time.Time) {
	c.now = t
	fired := false
	for tm := range c.timers {
		if !tm.at.After(t) {
			delete(c.timers, tm)
			tm.ch <- t
			fired = true
		}
	}
	if fired {
		c.notifyLocked()
	}
}

// REQUIRES: c.mu held.
func (c *Clock) notifyLocked() {
	close(c.changed)
	c.changed = make(chan struct{})
}

// Timers returns the number of timers waiting to fire.
func (c *Clock) Timers() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
}

// WaitTimers blocks until at least n timers are waiting to fire, or ctx is
// done. Tests call it before Advance, to know a goroutine is waiting.
func (c *Clock) WaitTimers(ctx context.Context, n int) error {
	for {
		c.mu.Lock()
		k, ch := len(c.timers), c.changed
		c.mu.Unlock()
		if k >= n {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// WaitTimersWithin blocks until at least n timers due within d of Now() (at
// or before Now()+d) are waiting to fire, or ctx is done. Tests use it to
// tell timers apart by their deadline: a heartbeat's interval timer from the
// timer bounding a call in progress.
func (c *Clock) WaitTimersWithin(ctx context.Context, n int, d time.Duration) error {
	for {
		c.mu.Lock()
		k, ch, limit := 0, c.changed, c.now.Add(d)
		for tm := range c.timers {
			if !tm.at.After(limit) {
				k++
			}
		}
		c.mu.Unlock()
		if k >= n {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

type timer struct {
	c  *Clock
	ch chan time.Time
	at time.Time
}

func (t *timer) C() <-chan time.Time { return t.ch }

func (t *timer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	if _, ok := t.c.timers[t]; !ok {
		return false
	}
	delete(t.c.timers, t)
	t.c.notifyLocked()
	return true
}
