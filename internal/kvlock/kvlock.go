package kvlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// ErrHeld is matched (errors.Is) by the *HeldError Take returns when
// another holds the lock.
var ErrHeld = errors.New("kvlock: the lock is held")

// ErrLost is the cause (context.Cause) of the context Take returned when
// a renewal failed: the lock is no longer held.
var ErrLost = errors.New("kvlock: the lock was lost")

// HeldError says who holds a lock Take could not take.
type HeldError struct {
	Bucket, Key string
	// Holder is the holder's value ("<holder> since <time>"), or "another
	// holder" when the key could not be read (it lapsed meanwhile).
	Holder string
	// TTL is the lock's TTL: a holder that died lets go within it.
	TTL time.Duration
}

func (e *HeldError) Error() string {
	return fmt.Sprintf("kvlock: %s (in bucket %s) is held by %s", e.Key, e.Bucket, e.Holder)
}

// Is makes errors.Is(err, ErrHeld) true.
func (e *HeldError) Is(target error) bool { return target == ErrHeld }

// Take takes the lock key in kv for holder, with a TTL of ttl (at least
// a second), renewed every third of it through js (kv's account) until
// release. It returns a context derived from ctx that is cancelled, with
// a cause wrapping ErrLost, when a renewal fails; the holder does its
// work under it. release stops the renewals and deletes the key; it
// waits for the renewal goroutine and is safe to call once.
//
// Errors: a *HeldError when the key exists; kv's otherwise.
func Take(ctx context.Context, js jetstream.JetStream, kv jetstream.KeyValue, key, holder string, ttl time.Duration) (context.Context, func(), error) {
	if ttl < time.Second {
		return nil, nil, fmt.Errorf("kvlock: ttl %s: at least 1s", ttl)
	}
	val := []byte(holder + " since " + time.Now().UTC().Format(time.RFC3339))
	rev, err := kv.Create(ctx, key, val, jetstream.KeyTTL(ttl))
	if errors.Is(err, jetstream.ErrKeyExists) {
		held := &HeldError{Bucket: kv.Bucket(), Key: key, Holder: "another holder", TTL: ttl}
		if e, gerr := kv.Get(ctx, key); gerr == nil {
			held.Holder = string(e.Value())
		}
		return nil, nil, held
	}
	if err != nil {
		return nil, nil, fmt.Errorf("kvlock: take %s: %w", key, err)
	}
	lctx, cancel := context.WithCancelCause(ctx)
	done := make(chan struct{})
	subject := "$KV." + kv.Bucket() + "." + key
	lost := false
	go func() {
		defer close(done)
		tick := time.NewTicker(ttl / 3)
		defer tick.Stop()
		for {
			select {
			case <-lctx.Done():
				return
			case <-tick.C:
			}
			rctx, rcancel := context.WithTimeout(lctx, ttl/3)
			ack, err := js.PublishMsg(rctx, &nats.Msg{Subject: subject, Data: val},
				jetstream.WithExpectLastSequencePerSubject(rev), jetstream.WithMsgTTL(ttl))
			rcancel()
			if lctx.Err() != nil {
				return // released meanwhile
			}
			if err != nil {
				lost = true
				cancel(fmt.Errorf("%w: %s could not be renewed: %w", ErrLost, key, err))
				return
			}
			rev = ack.Sequence
		}
	}()
	release := func() {
		cancel(nil)
		<-done
		if lost {
			return // another may hold it now
		}
		dctx, dcancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer dcancel()
		_ = kv.Delete(dctx, key, jetstream.LastRevision(rev)) // else it lapses after ttl
	}
	return lctx, release, nil
}
