package kvlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/forever-agents/forever/eventlog/eventlogtest"
	"github.com/forever-agents/forever/internal/kvlock"
)

func bucket(t *testing.T) (jetstream.JetStream, jetstream.KeyValue) {
	t.Helper()
	s := eventlogtest.RunServer(t, eventlogtest.ServerOptions{})
	js, err := jetstream.New(eventlogtest.Connect(t, s))
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.CreateKeyValue(t.Context(), jetstream.KeyValueConfig{Bucket: "LOCKS", LimitMarkerTTL: time.Second, Storage: jetstream.MemoryStorage})
	if err != nil {
		t.Fatal(err)
	}
	return js, kv
}

// TestTake: a lock held refuses a second Take with a HeldError naming its
// holder; once released it is taken again; a TTL under a second is
// refused.
func TestTake(t *testing.T) {
	ctx := t.Context()
	js, kv := bucket(t)
	lctx, release, err := kvlock.Take(ctx, js, kv, "move", "node-a", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = kvlock.Take(ctx, js, kv, "move", "node-b", 30*time.Second)
	var held *kvlock.HeldError
	if !errors.Is(err, kvlock.ErrHeld) || !errors.As(err, &held) || !strings.HasPrefix(held.Holder, "node-a since ") || held.TTL != 30*time.Second {
		t.Fatalf("second take while held: %v (%+v), want a HeldError naming node-a", err, held)
	}
	if !strings.Contains(err.Error(), "node-a since") {
		t.Errorf("refusal %q does not name the holder", err)
	}
	release()
	if lctx.Err() == nil {
		t.Error("the lock's context is not done after its release")
	}
	_, release2, err := kvlock.Take(ctx, js, kv, "move", "node-b", 30*time.Second)
	if err != nil {
		t.Fatalf("take after the release: %v", err)
	}
	release2()
	if _, _, err := kvlock.Take(ctx, js, kv, "move", "node-c", 500*time.Millisecond); err == nil || errors.Is(err, kvlock.ErrHeld) {
		t.Errorf("take with a TTL under 1s: %v, want refused", err)
	}
}

// TestRenewalLost: a lock whose key was taken away cancels its context at
// the next renewal, the cause wrapping ErrLost; its release leaves the
// next holder's key alone.
func TestRenewalLost(t *testing.T) {
	ctx := t.Context()
	js, kv := bucket(t)
	lctx, release, err := kvlock.Take(ctx, js, kv, "move", "node-a", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := kv.Delete(ctx, "move"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-lctx.Done():
	case <-time.After(time.Minute): // a bound, not a timing: renewals come every third of a second
		t.Fatal("the lock's context is not done after its key was deleted")
	}
	if cause := context.Cause(lctx); !errors.Is(cause, kvlock.ErrLost) {
		t.Fatalf("cause %v, want ErrLost", cause)
	}
	_, release2, err := kvlock.Take(ctx, js, kv, "move", "node-b", 30*time.Second)
	if err != nil {
		t.Fatalf("take after the loss: %v", err)
	}
	defer release2()
	release()
	if e, err := kv.Get(ctx, "move"); err != nil || !strings.HasPrefix(string(e.Value()), "node-b since ") {
		t.Fatalf("after the lost lock's release, the key: %v; want node-b's", err)
	}
}
