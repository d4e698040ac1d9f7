package eventlog_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/eventlog/eventlogtest"
)

// TestScanReportsReadErrors: a view scan whose sstable reads fail yields the
// error instead of ending as if it had seen every row.
func TestScanReportsReadErrors(t *testing.T) {
	failReads := &errorfs.Toggle{Injector: errorfs.InjectorFunc(func(op errorfs.Op) error {
		if op.Kind == errorfs.OpFileReadAt && strings.HasSuffix(op.Path, ".sst") {
			return errorfs.ErrInjected
		}
		return nil
	})}
	lg, _ := eventlogtest.Open(t, eventlog.Config{Dir: "db", FS: errorfs.Wrap(vfs.NewMem(), failReads)})
	appendN(t, lg, 20, 4)
	pr, err := lg.NewProjector(counter(1))
	if err != nil {
		t.Fatal(err)
	}
	eventlogtest.RunProjector(t, pr)
	if got := len(dump(t, lg, "counter")); got != 8 {
		t.Fatalf("rows before the fault = %d, want 8", got)
	}
	if err := eventlog.FlushProjections(lg); err != nil {
		t.Fatal(err)
	}
	v, err := lg.View("counter")
	if err != nil {
		t.Fatal(err)
	}
	failReads.On()
	defer failReads.Off()
	rows, errs := 0, 0
	for _, err := range v.Scan(nil) {
		if err != nil {
			if !errors.Is(err, errorfs.ErrInjected) {
				t.Errorf("scan error = %v, want the injected one", err)
			}
			errs++
			continue
		}
		rows++
	}
	if errs != 1 {
		t.Fatalf("scan saw %d rows and %d errors, want the read error reported once", rows, errs)
	}
}

// TestReadAfterClose: reading a view after Log.Close returns ErrClosed
// instead of panicking inside Pebble.
func TestReadAfterClose(t *testing.T) {
	lg, _ := eventlogtest.Open(t, eventlog.Config{})
	appendN(t, lg, 4, 2)
	pr, err := lg.NewProjector(counter(1))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- pr.Run(ctx) }()
	<-pr.Ready()
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	v, err := lg.View("counter")
	if err != nil {
		t.Fatal(err)
	}
	if err := lg.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := v.Get([]byte("n/agent0")); !errors.Is(err, eventlog.ErrClosed) {
		t.Errorf("Get after Close = %v, want ErrClosed", err)
	}
	var scanErr error
	for _, err := range v.Scan(nil) {
		scanErr = err
	}
	if !errors.Is(scanErr, eventlog.ErrClosed) {
		t.Errorf("Scan after Close = %v, want ErrClosed", scanErr)
	}
	if err := pr.Run(t.Context()); !errors.Is(err, eventlog.ErrClosed) {
		t.Errorf("Run after Close = %v, want ErrClosed", err)
	}
}

// TestWaitForAfterStop: WaitFor for a sequence the projector will never
// apply returns ErrStopped once Run returned cleanly, instead of blocking.
func TestWaitForAfterStop(t *testing.T) {
	lg, _ := eventlogtest.Open(t, eventlog.Config{})
	pr, err := lg.NewProjector(counter(1))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- pr.Run(ctx) }()
	<-pr.Ready()
	waited := make(chan error, 1)
	go func() { waited <- pr.WaitFor(t.Context(), 1) }()
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := <-waited; !errors.Is(err, eventlog.ErrStopped) {
		t.Fatalf("WaitFor in flight at stop = %v, want ErrStopped", err)
	}
	seq, err := lg.Append(t.Context(), eventlog.Event{Agent: "a", Type: "tick", Data: json.RawMessage("1")})
	if err != nil {
		t.Fatal(err)
	}
	if err := pr.WaitFor(t.Context(), seq); !errors.Is(err, eventlog.ErrStopped) {
		t.Fatalf("WaitFor after stop = %v, want ErrStopped", err)
	}
}
