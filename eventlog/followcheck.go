package eventlog

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// ErrConsumerLimit is returned by CheckFollow, and yielded by Follow, when no consumer can be
// created to follow a stream: the account's consumer limit (a tenant's
// quota) or the stream's is reached. It ends when consumers end (an
// ordered consumer the client stopped is removed after its inactivity
// threshold).
var ErrConsumerLimit = errors.New("eventlog: consumer limit reached")

// consumerLimit marks the server's "maximum consumers limit reached" as
// ErrConsumerLimit, keeping it, and forgets stream's headroom.
func (l *Log) consumerLimit(stream string, err error) error {
	if errors.Is(err, jetstream.ErrMaximumConsumersLimit) {
		l.headroom.forget(stream)
		return fmt.Errorf("%w: %w", ErrConsumerLimit, err)
	}
	return err
}

// checkFollowTimeout bounds CheckFollow's reads: past it, the follow is
// tried.
const checkFollowTimeout = 2 * time.Second

// headroomTTL is how long a CheckFollow that found headroom lets the next
// ones through without reading again: each read costs two JetStream API
// calls (about 0.3 ms, a tenth of a short turn).
const headroomTTL = time.Second

// headroom is what the last CheckFollow of a stream found room for: until
// until, budget more follows pass without a read. The budget is half the
// consumers free then, so the follows it lets through cannot fill the
// limit by themselves; consumers created meanwhile by others can, and
// such a follow then fails with ErrConsumerLimit as it would unchecked
// (the gateway answers it with an error chunk, not an empty stream), and
// forgets the headroom.
type headroom struct {
	mu       sync.Mutex
	byStream map[string]room
}

type room struct {
	until  time.Time
	budget int
}

// take reports whether stream's headroom lets one more follow pass
// without a read, spending it.
func (h *headroom) take(stream string, now time.Time) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	r, ok := h.byStream[stream]
	if !ok || !now.Before(r.until) || r.budget <= 0 {
		return false
	}
	r.budget--
	h.byStream[stream] = r
	return true
}

// set records that stream had free consumers free at now (-1: no limit).
func (h *headroom) set(stream string, free int, now time.Time) {
	budget := free / 2
	if free < 0 {
		budget = 1 << 20
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if budget <= 0 {
		delete(h.byStream, stream)
		return
	}
	if h.byStream == nil {
		h.byStream = map[string]room{}
	}
	h.byStream[stream] = room{until: now.Add(headroomTTL), budget: budget}
}

// forget drops stream's headroom: a follow found no room.
func (h *headroom) forget(stream string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.byStream, stream)
}

// freeOf returns how many of limit are free when used are in use, -1 for
// no limit (limit 0 or less).
func freeOf(limit, used int) int {
	if limit <= 0 {
		return -1
	}
	return max(0, limit-used)
}

// minFree is the smaller of two freeOf results.
func minFree(a, b int) int {
	switch {
	case a < 0:
		return b
	case b < 0:
		return a
	}
	return min(a, b)
}

// CheckFollow reports, before a Follow of f, whether one more consumer
// can be created on its stream: ErrConsumerLimit when the account or the
// stream already holds as many as its limit allows. Without it, a follow
// created past the limit would retry in the client library until its
// context ends, yielding nothing. A check that cannot be made (the
// account's info is not readable with these permissions) is no
// refusal: the follow is tried. A check that found room lets up to half
// of it through for headroomTTL without reading again (headroom).
func (l *Log) CheckFollow(ctx context.Context, f Filter) error {
	_, stream, err := l.filter(f)
	if err != nil {
		return err
	}
	if l.headroom.take(stream, time.Now()) {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, checkFollowTimeout)
	defer cancel()
	ai, aerr := l.js.AccountInfo(ctx)
	if aerr == nil && ai.Limits.MaxConsumers > 0 && ai.Consumers >= ai.Limits.MaxConsumers {
		return fmt.Errorf("%w: the account holds %d consumers, its limit", ErrConsumerLimit, ai.Consumers)
	}
	st, err := l.js.Stream(ctx, stream)
	if err != nil {
		return nil
	}
	info := st.CachedInfo() // read just now by Stream
	if info == nil {
		return nil
	}
	if info.Config.MaxConsumers > 0 && info.State.Consumers >= info.Config.MaxConsumers {
		return fmt.Errorf("%w: stream %s holds %d consumers, its limit", ErrConsumerLimit, stream, info.State.Consumers)
	}
	if aerr == nil { // the account's room unknown: no headroom kept
		l.headroom.set(stream, minFree(freeOf(ai.Limits.MaxConsumers, ai.Consumers), freeOf(info.Config.MaxConsumers, info.State.Consumers)), time.Now())
	}
	return nil
}
