package chat_test

import (
	"context"
	"errors"
	"testing"

	"github.com/forever-agents/forever/chat"
	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/eventlog/eventlogtest"
)

// TestStoreWaitForAfterStop: once the store's projectors stopped cleanly,
// WaitFor and WaitForChunks return ErrStopped instead of blocking.
func TestStoreWaitForAfterStop(t *testing.T) {
	lg, _ := eventlogtest.Open(t, eventlog.Config{})
	store, prs, err := chat.OpenStore(lg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, len(prs))
	for _, pr := range prs {
		go func() { done <- pr.Run(ctx) }()
	}
	if err := store.WaitReady(t.Context()); err != nil {
		t.Fatal(err)
	}
	cancel()
	for range prs {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if err := store.WaitFor(t.Context(), 1); !errors.Is(err, eventlog.ErrStopped) {
		t.Fatalf("WaitFor after stop = %v, want ErrStopped", err)
	}
	if err := store.WaitForChunks(t.Context(), 1); !errors.Is(err, eventlog.ErrStopped) {
		t.Fatalf("WaitForChunks after stop = %v, want ErrStopped", err)
	}
}

// TestStoreReadsAfterClose: the store's reads return ErrClosed once the
// Log is closed, instead of panicking inside Pebble.
func TestStoreReadsAfterClose(t *testing.T) {
	lg, _ := eventlogtest.Open(t, eventlog.Config{})
	store, _, err := chat.OpenStore(lg)
	if err != nil {
		t.Fatal(err)
	}
	if err := lg.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := store.History("a1"); !errors.Is(err, eventlog.ErrClosed) {
		t.Errorf("History after Close = %v, want ErrClosed", err)
	}
	if _, err := store.Streams().List("a1"); !errors.Is(err, eventlog.ErrClosed) {
		t.Errorf("Streams.List after Close = %v, want ErrClosed", err)
	}
	if _, _, err := store.ActiveTurn("a1"); !errors.Is(err, eventlog.ErrClosed) {
		t.Errorf("ActiveTurn after Close = %v, want ErrClosed", err)
	}
}
