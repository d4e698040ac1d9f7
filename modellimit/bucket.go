package modellimit

import (
	"math"
	"time"
)

// bucket is a token bucket: level units, refilled at rate a second up to
// capacity. A zero rate is no limit. level may go below zero: a call
// that used more tokens than it was estimated at takes the rest from
// what comes next.
type bucket struct {
	rate     float64 // units a second; 0: unlimited
	capacity float64
	level    float64
	at       time.Time // when level was last brought up to date
}

func newBucket(rate, burst float64, now time.Time) bucket {
	return bucket{rate: rate, capacity: burst, level: burst, at: now}
}

func (b *bucket) unlimited() bool { return b.rate <= 0 }

// refill brings level up to now at rate (the node's share of the
// cluster's).
func (b *bucket) refill(now time.Time, rate float64) {
	if b.unlimited() {
		return
	}
	if dt := now.Sub(b.at).Seconds(); dt > 0 {
		b.level = math.Min(b.capacity, b.level+dt*rate)
	}
	b.at = now
}

// need is what must be in the bucket to take n: n, or the whole capacity
// for more than it holds (the excess is then owed).
func (b *bucket) need(n float64) float64 { return math.Min(n, b.capacity) }

func (b *bucket) has(n float64) bool { return b.unlimited() || b.level >= b.need(n) }

func (b *bucket) take(n float64) {
	if !b.unlimited() {
		b.level -= n
	}
}

// readyIn is how long until n can be taken at rate; 0 when it can now.
func (b *bucket) readyIn(n, rate float64) time.Duration {
	if b.has(n) || rate <= 0 {
		return 0
	}
	return time.Duration((b.need(n) - b.level) / rate * float64(time.Second))
}
