package eventlog_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/eventlog/eventlogtest"
	"github.com/forever-agents/forever/internal/waitfor"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestStorageFull: when JetStream's store is full an append fails with
// ErrStorageFull and writes nothing; reads go on; once space returns
// appends succeed again on the same Log.
func TestStorageFull(t *testing.T) {
	s := eventlogtest.RunServer(t, eventlogtest.ServerOptions{MaxStore: 4 << 20})
	lg := eventlogtest.OpenOn(t, s, eventlog.Config{})
	ctx := t.Context()
	// Ballast in another stream takes most of the room.
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ballast, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "BALLAST", Subjects: []string{"ballast"}, Storage: jetstream.FileStorage})
	if err != nil {
		t.Fatal(err)
	}
	big := []byte(strings.Repeat("b", 64<<10))
	for range 40 {
		if _, err := js.Publish(ctx, "ballast", big); err != nil {
			break
		}
	}
	data := []byte(`"` + strings.Repeat("x", 8<<10) + `"`)
	var stored int
	var full error
	for range 2000 {
		if _, err := lg.Append(ctx, eventlog.Event{Agent: "a1", Type: "note", Data: data}); err != nil {
			full = err
			break
		}
		stored++
	}
	if !errors.Is(full, eventlog.ErrStorageFull) {
		t.Fatalf("after %d appends: %v, want ErrStorageFull", stored, full)
	}
	evs, err := lg.Read(ctx, eventlog.Filter{Agent: "a1"}, 0, 0)
	if err != nil || len(evs) != stored {
		t.Fatalf("read with the store full: %d events, %v; want the %d stored", len(evs), err, stored)
	}
	if err := ballast.Purge(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := lg.Append(ctx, eventlog.Event{Agent: "a1", Type: "note", Data: data}); err != nil {
		t.Fatalf("append once space returned: %v", err)
	}
}

// diskFull fails every write Pebble makes with ENOSPC while it is on;
// removals still succeed (they free space).
func diskFull() *errorfs.Toggle {
	return &errorfs.Toggle{Injector: errorfs.InjectorFunc(func(op errorfs.Op) error {
		if op.Kind.ReadOrWrite() == errorfs.OpIsWrite && op.Kind != errorfs.OpRemove && op.Kind != errorfs.OpFileClose {
			return &os.PathError{Op: "write", Path: op.Path, Err: syscall.ENOSPC}
		}
		return nil
	})}
}

// TestViewsStallWhenPebbleIsFull: when Pebble's disk is full the views stop
// moving and Log.Stalled says why (ErrViewsStalled and ErrStorageFull), appends to the log still succeed, the views can
// still be read, and once space returns the Follower resumes by itself and
// the views hold every event: nothing acknowledged was lost.
func TestViewsStallWhenPebbleIsFull(t *testing.T) {
	ctx := t.Context()
	full := diskFull()
	lg, _ := eventlogtest.Open(t, eventlog.Config{Dir: "db", FS: errorfs.Wrap(vfs.NewMem(), full)})
	f := crashFollower(t, lg)
	eventlogtest.RunFollower(t, f)
	appendN(t, lg, 30, 3)
	if err := f.WaitFor(ctx, 30); err != nil {
		t.Fatal(err)
	}

	full.On()
	appendN(t, lg, 30, 3) // the log itself has room
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	waitfor.True(t, "the views to stall", func() bool { return lg.Stalled() != nil })
	err := lg.Stalled()
	if !errors.Is(err, eventlog.ErrViewsStalled) || !errors.Is(err, eventlog.ErrStorageFull) {
		t.Fatalf("Stalled with Pebble full = %v, want ErrViewsStalled and ErrStorageFull", err)
	}
	if !strings.Contains(err.Error(), "no space left") {
		t.Errorf("error %q does not name the cause", err)
	}
	// WaitDurable waits (the work behind it pauses), bounded by its ctx:
	// what the views applied cannot be made durable. (WaitFor may answer:
	// a commit is visible before its background sync failed.)
	short, cancelShort := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancelShort()
	if err := f.WaitDurable(short, 60); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitDurable while stalled = %v, want it to wait until its deadline", err)
	}
	// Reads go on, and show a prefix of the log.
	all, err := lg.Read(ctx, eventlog.Filter{}, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	cur, err := eventlog.StoredCursor(lg, "count_a")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := dump(t, lg, "count_a"), fold(all[:cur]); cur < 30 || !equalMaps(got, want) {
		t.Errorf("views while stalled, cursor %d: got %v, want %v", cur, got, want)
	}
	// Not a synchronisation: a few probes fail while the disk is full, and
	// the stall must outlast them.
	time.Sleep(2 * time.Second)
	full.Off()
	if err := f.WaitDurable(wctx, 60); err != nil {
		t.Fatalf("WaitDurable after space returned: %v", err)
	}
	if err := lg.Stalled(); err != nil {
		t.Errorf("Stalled after the views resumed: %v", err)
	}
	all, err = lg.Read(ctx, eventlog.Filter{}, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range crashViews {
		if got, want := dump(t, lg, name), fold(all); !equalMaps(got, want) {
			t.Errorf("%s after space returned: got %v, want %v", name, got, want)
		}
	}
	appendN(t, lg, 5, 3)
	if err := f.WaitFor(wctx, 65); err != nil {
		t.Fatalf("WaitFor of a new event: %v", err)
	}
}
