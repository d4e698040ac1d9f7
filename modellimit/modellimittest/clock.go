package modellimittest

import (
	"sync"
	"time"
)

// Clock is a modellimit.Clock that moves only when the test says: Advance
// fires every timer taken since the last Advance, so each waiter in the
// limiter wakes once and looks again.
type Clock struct {
	mu     sync.Mutex
	now    time.Time
	timers []chan time.Time
}

// NewClock returns a Clock at 2026-01-01 00:00 UTC.
func NewClock() *Clock {
	return &Clock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
}

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// After returns a timer that fires at the next Advance, whatever d.
func (c *Clock) After(time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan time.Time, 1)
	c.timers = append(c.timers, ch)
	return ch
}

// Advance moves the clock by d and fires every timer taken before.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	ts := c.timers
	c.timers = nil
	now := c.now
	c.mu.Unlock()
	for _, ch := range ts {
		ch <- now
	}
}

// Pending returns how many timers wait for the next Advance.
func (c *Clock) Pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
}
