package eventlog_test

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/eventlog/eventlogtest"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// counter is the projection used by these tests. Per agent it keeps a count,
// the last sequence and a hash chained over the events' data, so a skipped,
// doubled or reordered event changes the view.
func counter(version int) eventlog.Projection {
	return eventlog.Projection{
		Name:    "counter",
		Version: version,
		Apply: func(b *eventlog.Batch, e eventlog.Event) error {
			st := map[string]string{}
			for _, k := range []string{"n/", "h/"} {
				v, err := b.Get([]byte(k + e.Agent))
				if err != nil && !errors.Is(err, eventlog.ErrNotFound) {
					return err
				}
				st[k] = string(v)
			}
			n, next := applyCounter(st["n/"], st["h/"], e)
			if err := b.Set([]byte("n/"+e.Agent), []byte(n)); err != nil {
				return err
			}
			return b.Set([]byte("h/"+e.Agent), []byte(next))
		},
	}
}

func applyCounter(n, h string, e eventlog.Event) (string, string) {
	c, _ := strconv.Atoi(n)
	sum := sha256.Sum256([]byte(h + string(e.Data)))
	return strconv.Itoa(c + 1), hex.EncodeToString(sum[:8])
}

// fold computes the counter view in memory from events.
func fold(evs []eventlog.Event) map[string]string {
	st := map[string]string{}
	for _, e := range evs {
		st["n/"+e.Agent], st["h/"+e.Agent] = applyCounter(st["n/"+e.Agent], st["h/"+e.Agent], e)
	}
	return st
}

func dump(t testing.TB, lg *eventlog.Log, name string) map[string]string {
	t.Helper()
	v, err := lg.View(name)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for kv, err := range v.Scan(nil) {
		if err != nil {
			t.Fatal(err)
		}
		out[string(kv.Key)] = string(kv.Value)
	}
	return out
}

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func appendN(t testing.TB, lg *eventlog.Log, n, agents int) {
	t.Helper()
	evs := make([]eventlog.Event, 0, 500)
	flush := func() {
		if len(evs) == 0 {
			return
		}
		if _, err := lg.AppendBatch(context.Background(), evs); err != nil {
			t.Fatal(err)
		}
		evs = evs[:0]
	}
	for i := range n {
		evs = append(evs, eventlog.Event{Agent: fmt.Sprintf("agent%d", i%agents), Type: "tick", Data: json.RawMessage(strconv.Itoa(i))})
		if len(evs) == cap(evs) {
			flush()
		}
	}
	flush()
}

func TestProjectorAppliesAndWaits(t *testing.T) {
	lg, _ := eventlogtest.Open(t, eventlog.Config{})
	appendN(t, lg, 100, 3)
	pr, err := lg.NewProjector(counter(1))
	if err != nil {
		t.Fatal(err)
	}
	eventlogtest.RunProjector(t, pr)
	if got := pr.Cursor(); got != 100 {
		t.Fatalf("cursor after ready = %d, want 100", got)
	}
	seq, err := lg.Append(t.Context(), eventlog.Event{Agent: "agent0", Type: "tick", Data: json.RawMessage("100")})
	if err != nil {
		t.Fatal(err)
	}
	if err := pr.WaitFor(t.Context(), seq); err != nil {
		t.Fatal(err)
	}
	all, _ := lg.Read(t.Context(), eventlog.Filter{}, 0, 0)
	if got, want := dump(t, lg, "counter"), fold(all); !equalMaps(got, want) {
		t.Fatalf("view = %v, want %v", got, want)
	}
	if _, err := lg.NewProjector(counter(1)); !errors.Is(err, eventlog.ErrInvalid) {
		t.Fatalf("second projector with same name: %v", err)
	}
}

func TestProjectorFilterAndChunks(t *testing.T) {
	lg, _ := eventlogtest.Open(t, eventlog.Config{})
	appendN(t, lg, 10, 2)
	if _, err := lg.AppendBatch(t.Context(), []eventlog.Event{
		{Agent: "agent0", Stream: "s1", Type: "chunk", Data: json.RawMessage(`"a"`)},
		{Agent: "agent0", Stream: "s1", Type: "chunk", Data: json.RawMessage(`"b"`)},
	}); err != nil {
		t.Fatal(err)
	}
	p := counter(1)
	p.Name, p.Filter = "chunks", eventlog.Filter{Chunks: true}
	pr, err := lg.NewProjector(p)
	if err != nil {
		t.Fatal(err)
	}
	eventlogtest.RunProjector(t, pr)
	if got := dump(t, lg, "chunks")["n/agent0"]; got != "2" {
		t.Fatalf("chunk count = %q, want 2", got)
	}
}

// runUntilReady runs p until it is ready, then calls during (when set),
// stops it, and returns its view and cursor.
func runUntilReady(t *testing.T, lg *eventlog.Log, p eventlog.Projection, during func(*eventlog.Projector)) (map[string]string, eventlog.Seq) {
	t.Helper()
	pr, err := lg.NewProjector(p)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- pr.Run(ctx) }()
	<-pr.Ready()
	if during != nil {
		during(pr)
	}
	m := dump(t, lg, p.Name)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	return m, pr.Cursor()
}

// Changing the schema version drops the view and rebuilds it from the log;
// deleting the Pebble directory does the same; Rebuild does it on demand.
func TestProjectorRebuilds(t *testing.T) {
	s := eventlogtest.RunServer(t, eventlogtest.ServerOptions{})
	dir := t.TempDir()
	nc := eventlogtest.Connect(t, s)
	open := func(dir string) *eventlog.Log {
		lg, err := eventlog.Open(t.Context(), eventlog.Config{Conn: nc, Dir: dir})
		if err != nil {
			t.Fatal(err)
		}
		return lg
	}

	lg := open(dir)
	appendN(t, lg, 300, 4)
	all, _ := lg.Read(t.Context(), eventlog.Filter{}, 0, 0)
	want := fold(all)
	first, cur := runUntilReady(t, lg, counter(1), nil)
	if !equalMaps(first, want) || cur != 300 {
		t.Fatalf("first build: cursor %d, view %v", cur, first)
	}
	lg.Close()

	// Make the stored view wrong on purpose: a different Apply under the
	// same name and version, rebuilt.
	bad := counter(1)
	bad.Apply = func(b *eventlog.Batch, e eventlog.Event) error { return b.Set([]byte("junk"), []byte("x")) }
	lg = open(dir)
	junk, _ := runUntilReady(t, lg, bad, func(pr *eventlog.Projector) {
		if err := pr.Rebuild(t.Context()); err != nil {
			t.Fatal(err)
		}
		if err := pr.WaitFor(t.Context(), 300); err != nil {
			t.Fatal(err)
		}
	})
	if len(junk) != 1 {
		t.Fatalf("junk view = %v", junk)
	}
	lg.Close()

	// A version bump drops the stale rows and rebuilds from the log.
	lg = open(dir)
	got, cur := runUntilReady(t, lg, counter(2), nil)
	if !equalMaps(got, want) || cur != 300 {
		t.Fatalf("after version bump: cursor %d, view %v", cur, got)
	}
	lg.Close()

	// Rebuild on demand gives the same view.
	lg = open(dir)
	got, _ = runUntilReady(t, lg, counter(2), func(pr *eventlog.Projector) {
		if err := pr.Rebuild(t.Context()); err != nil {
			t.Fatal(err)
		}
		if err := pr.WaitFor(t.Context(), 300); err != nil {
			t.Fatal(err)
		}
	})
	if !equalMaps(got, want) {
		t.Fatalf("after Rebuild: %v", got)
	}
	lg.Close()

	// Deleting the Pebble directory rebuilds an identical view.
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	lg = open(dir)
	defer lg.Close()
	got, cur = runUntilReady(t, lg, counter(2), nil)
	if !equalMaps(got, want) || cur != 300 {
		t.Fatalf("after deleting pebble: cursor %d, view %v", cur, got)
	}
}

// A view is kept only while it was built from the stream it follows: a
// restarted server on the same store resumes it, a replaced store (the
// cursor is past the stream's end) or a stream deleted and created again
// (another origin) rebuilds it from the log it now follows.
func TestProjectorFollowsItsStream(t *testing.T) {
	pebbleDir, storeA := t.TempDir(), t.TempDir()
	// phase opens a Log on s with the shared Pebble dir, appends n events,
	// runs the counter projection until ready and returns how many events
	// it applied and whether the view equals the fold of the whole log.
	phase := func(name string, s *server.Server, n int) (applied int) {
		t.Helper()
		nc := eventlogtest.Connect(t, s)
		lg, err := eventlog.Open(t.Context(), eventlog.Config{Conn: nc, Dir: pebbleDir})
		if err != nil {
			t.Fatal(err)
		}
		defer lg.Close()
		appendN(t, lg, n, 3)
		p := counter(1)
		apply := p.Apply
		p.Apply = func(b *eventlog.Batch, e eventlog.Event) error { applied++; return apply(b, e) }
		got, _ := runUntilReady(t, lg, p, nil)
		all, _ := lg.Read(t.Context(), eventlog.Filter{}, 0, 0)
		if want := fold(all); !equalMaps(got, want) {
			t.Errorf("%s: view %v, want the fold of the log %v", name, got, want)
		}
		return applied
	}
	stop := func(s *server.Server) { s.Shutdown(); s.WaitForShutdown() }

	s := eventlogtest.RunServer(t, eventlogtest.ServerOptions{StoreDir: storeA})
	if got := phase("first build", s, 300); got != 300 {
		t.Fatalf("first build applied %d events, want 300", got)
	}
	stop(s)
	s = eventlogtest.RunServer(t, eventlogtest.ServerOptions{StoreDir: storeA})
	if got := phase("restarted server", s, 10); got != 10 {
		t.Fatalf("after a server restart applied %d events, want only the 10 new ones", got)
	}
	stop(s)

	// Another store: the stored cursor (310) is past its end (50).
	s = eventlogtest.RunServer(t, eventlogtest.ServerOptions{})
	if got := phase("replaced store", s, 50); got != 50 {
		t.Fatalf("on a replaced store applied %d events, want a rebuild of 50", got)
	}
	// The stream deleted and created again, longer than the cursor (50).
	js, err := jetstream.New(eventlogtest.Connect(t, s))
	if err != nil {
		t.Fatal(err)
	}
	if err := js.DeleteStream(t.Context(), eventlog.DefaultEventsStream); err != nil {
		t.Fatal(err)
	}
	if got := phase("recreated stream", s, 400); got != 400 {
		t.Fatalf("on a recreated stream applied %d events, want a rebuild of 400", got)
	}
}

// A corrupt stored event is skipped by projections (and counted), reported by
// Read with its sequence, and loses nothing: the events around it apply.
func TestCorruptStoredEvent(t *testing.T) {
	lg, s := eventlogtest.Open(t, eventlog.Config{})
	appendN(t, lg, 2, 1)
	raw := eventlogtest.Connect(t, s)
	// Written behind the log's back: not an envelope.
	if _, err := raw.Request("forever.evt.agent0", []byte("{not json"), 5*time.Second); err != nil {
		t.Fatal(err)
	}
	appendN(t, lg, 2, 1)
	_, err := lg.Read(t.Context(), eventlog.Filter{}, 0, 0)
	var ce *eventlog.CorruptError
	if !errors.As(err, &ce) || !errors.Is(err, eventlog.ErrCorrupt) || ce.Seq != 3 {
		t.Fatalf("read err = %v, want corrupt event at seq 3", err)
	}
	pr, err := lg.NewProjector(counter(1))
	if err != nil {
		t.Fatal(err)
	}
	eventlogtest.RunProjector(t, pr)
	if got := dump(t, lg, "counter")["n/agent0"]; got != "4" || pr.Cursor() != 5 {
		t.Fatalf("count = %q cursor = %d, want 4 events applied and cursor 5", got, pr.Cursor())
	}
}

// TestProjectionCrash runs a child process that applies a long event stream to
// a projection and SIGKILLs it at random points. After every kill the stored
// view equals the view folded from the log up to the stored cursor; after the
// last run it equals the view of the whole log.
func TestProjectionCrash(t *testing.T) {
	if os.Getenv("EVENTLOG_CRASH_CHILD") != "" {
		return
	}
	if testing.Short() {
		t.Skip("crash test")
	}
	// Enough that the kills land mid-stream: on a loaded machine eight
	// rounds projected a few hundred events, so 30,000 only lengthened the
	// append and the last round.
	const total = 10000
	s := eventlogtest.RunServer(t, eventlogtest.ServerOptions{})
	lg := eventlogtest.OpenOn(t, s, eventlog.Config{})
	appendN(t, lg, total, 7)
	all, err := lg.Read(t.Context(), eventlog.Filter{}, 0, 0)
	if err != nil || len(all) != total {
		t.Fatalf("read %d: %v", len(all), err)
	}
	dir := t.TempDir()
	nc := eventlogtest.Connect(t, s)
	midway := 0
	for round := 0; ; round++ {
		last := round == 8
		cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.v")
		cmd.Env = append(os.Environ(), "EVENTLOG_CRASH_CHILD=1", "EVENTLOG_NATS="+s.ClientURL(), "EVENTLOG_DIR="+dir)
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(out)
		for sc.Scan() && !strings.Contains(sc.Text(), "child: running") {
		}
		if !last {
			// Not a synchronisation: the kill lands at a random point.
			time.Sleep(time.Duration(rand.IntN(150)) * time.Millisecond)
			cmd.Process.Signal(syscall.SIGKILL)
		}
		go func() {
			for sc.Scan() {
			}
		}()
		err = cmd.Wait()
		if last && err != nil {
			t.Fatalf("final child run: %v", err)
		}
		// Check the stored projection against the log up to its cursor.
		check, err := eventlog.Open(t.Context(), eventlog.Config{Conn: nc, Dir: dir})
		if err != nil {
			t.Fatalf("round %d: reopen: %v", round, err)
		}
		cur, err := eventlog.StoredCursor(check, "counter")
		if err != nil {
			t.Fatal(err)
		}
		got := dump(t, check, "counter")
		check.Close()
		if want := fold(all[:cur]); !equalMaps(got, want) {
			t.Fatalf("round %d: view at cursor %d differs from the log folded to %d:\n got %v\nwant %v", round, cur, cur, got, want)
		}
		if cur > 0 && cur < total {
			midway++
		}
		t.Logf("round %d: cursor %d of %d", round, cur, total)
		if last {
			if cur != total {
				t.Fatalf("final cursor = %d, want %d", cur, total)
			}
			break
		}
	}
	t.Logf("%d kills landed mid-stream", midway)
	// A projection built from scratch in a new directory is identical.
	fresh := eventlogtest.OpenOn(t, s, eventlog.Config{})
	pr, err := fresh.NewProjector(counter(1))
	if err != nil {
		t.Fatal(err)
	}
	eventlogtest.RunProjector(t, pr)
	if got, want := dump(t, fresh, "counter"), fold(all); !equalMaps(got, want) {
		t.Fatal("rebuilt view differs")
	}
}

// TestCrashChild is the child of TestProjectionCrash; it does nothing unless
// started by it.
func TestCrashChild(t *testing.T) {
	if os.Getenv("EVENTLOG_CRASH_CHILD") == "" {
		t.Skip("child of TestProjectionCrash")
	}
	nc, err := nats.Connect(os.Getenv("EVENTLOG_NATS"))
	if err != nil {
		t.Fatal(err)
	}
	lg, err := eventlog.Open(context.Background(), eventlog.Config{Conn: nc, Dir: filepath.Clean(os.Getenv("EVENTLOG_DIR"))})
	if err != nil {
		t.Fatal(err)
	}
	pr, err := lg.NewProjector(counter(1))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- pr.Run(ctx) }()
	fmt.Println("child: running")
	select {
	case <-pr.Ready():
	case err := <-done:
		t.Fatal(err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	lg.Close()
	nc.Close()
}
