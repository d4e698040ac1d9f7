package ownership

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/forever-agents/forever/eventlog/eventlogtest"
)

// TestFormatSwitch: a record format is raised only once every live node
// reads it, never goes back, keeps a node of an older release from
// starting, and stops a running one that cannot read it.
func TestFormatSwitch(t *testing.T) {
	s := eventlogtest.RunServer(t, eventlogtest.ServerOptions{})
	cfg := func(name string, reads int) Config {
		return Config{Node: name, Partitions: 4, TTL: 2 * time.Second, RenewEvery: 100 * time.Millisecond, Format: reads}
	}
	ctx := context.Background()
	a := startNode(t, s, cfg("a", 2))
	b := startNode(t, s, cfg("b", FormatBase)) // the previous release
	eventually(t, "a sees b announce format 1", func() bool {
		info, err := a.m.Formats(ctx)
		return err == nil && info.Nodes["b"] == FormatBase && info.Nodes["a"] == 2
	})
	info, err := a.m.Formats(ctx)
	if err != nil || info.Active != FormatBase || info.Ready != FormatBase {
		t.Fatalf("formats %+v, %v; want active and ready 1", info, err)
	}
	if got, err := a.m.Activate(ctx, 2); !errors.Is(err, ErrFormatNotReady) || got != FormatBase {
		t.Fatalf("Activate(2) with b on format 1: %d, %v; want 1 and ErrFormatNotReady", got, err)
	}

	// b is upgraded: stopped, started again reading format 2.
	b.stop(t)
	b = startNode(t, s, cfg("b", 2))
	eventually(t, "a sees b announce format 2", func() bool {
		info, err := a.m.Formats(ctx)
		return err == nil && info.Nodes["b"] == 2 && info.Ready == 2
	})
	if got, err := a.m.Activate(ctx, 2); err != nil || got != 2 {
		t.Fatalf("Activate(2) with every node on 2: %d, %v", got, err)
	}
	if got, err := b.m.Activate(ctx, FormatBase); err != nil || got != 2 {
		t.Fatalf("Activate(1) after 2: %d, %v; want 2: a format never goes back", got, err)
	}

	// A node of the previous release cannot join any more.
	if _, err := New(ctx, Config{Conn: eventlogtest.Connect(t, s), Node: "c", Partitions: 4}); !errors.Is(err, ErrFormatTooNew) {
		t.Fatalf("a format-1 node joining a format-2 cluster: %v, want ErrFormatTooNew", err)
	}

	// A running node that finds the format past its own stops serving.
	b.stop(t)
	if _, err := a.m.parts.Put(ctx, keyFormat, []byte("3")); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-a.done:
		a.done <- nil // for the cleanup's stop
		if !errors.Is(err, ErrFormatTooNew) {
			t.Fatalf("a stopped with %v, want ErrFormatTooNew", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a node on format 2 kept running in a format-3 cluster")
	}
	if a.m.OwnedCount() != 0 {
		t.Fatalf("a stopped still owning %d partitions", a.m.OwnedCount())
	}
}

// TestFormatAutoActivate: with AutoActivate the active format follows the
// live nodes on its own: it stays while a node of the previous release
// lives, rises once the last one is upgraded, and ActiveFormat, which
// writers consult without I/O, shows it on every node.
func TestFormatAutoActivate(t *testing.T) {
	s := eventlogtest.RunServer(t, eventlogtest.ServerOptions{})
	cfg := func(name string, reads int) Config {
		return Config{Node: name, Partitions: 4, TTL: 2 * time.Second, RenewEvery: 100 * time.Millisecond, Format: reads, AutoActivate: true}
	}
	// The previous release runs first; a node of this release joins it.
	b := startNode(t, s, cfg("b", FormatBase))
	a := startNode(t, s, cfg("a", 2))
	eventually(t, "a sees b announce format 1", func() bool {
		info, err := a.m.Formats(context.Background())
		return err == nil && info.Nodes["b"] == FormatBase
	})
	// Several heartbeats with b alive: nothing is raised.
	for range 5 {
		time.Sleep(150 * time.Millisecond) // not a synchronisation: heartbeats of 100 ms pass, and nothing may be raised
		if got := a.m.ActiveFormat(); got != FormatBase {
			t.Fatalf("active format %d while a node reads only %d", got, FormatBase)
		}
	}
	b.stop(t)
	b = startNode(t, s, cfg("b", 2))
	eventually(t, "the format raised to 2 on both nodes", func() bool {
		return a.m.ActiveFormat() == 2 && b.m.ActiveFormat() == 2
	})
}
