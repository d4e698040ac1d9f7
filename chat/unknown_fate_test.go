package chat_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/forever-agents/forever/chat"
	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/fiber"
	"github.com/forever-agents/forever/verify"
)

// lateLog is the real log behind a JetStream that answers late, as while
// a stream elects its leader: every append of one event type is held by
// the "server" until release is closed, then stored (or dropped as a
// duplicate of its id). The first caller gives up before that: once the
// test closes deadline it gets what Append returns when the caller's
// deadline passed after the event was sent. Later appends of the type wait
// for release like any append JetStream answers late.
type lateLog struct {
	*eventlog.Log
	typ      string
	held     chan struct{} // closed when the first append of typ is held
	deadline chan struct{} // closed by the test: the first caller's deadline passes
	release  chan struct{} // closed by the test: the server answers
	once     sync.Once
	wg       sync.WaitGroup
	mu       sync.Mutex
	n        int
	results  []error
}

func newLateLog(t *testing.T, lg *eventlog.Log, typ string) *lateLog {
	l := &lateLog{Log: lg, typ: typ, held: make(chan struct{}), deadline: make(chan struct{}), release: make(chan struct{})}
	t.Cleanup(l.wg.Wait)
	t.Cleanup(func() {
		select {
		case <-l.release:
		default:
			close(l.release)
		}
	})
	return l
}

func (l *lateLog) Append(ctx context.Context, e eventlog.Event, opts ...eventlog.AppendOpt) (eventlog.Seq, error) {
	if e.Type != l.typ {
		return l.Log.Append(ctx, e, opts...)
	}
	return l.late(ctx, e, func(ctx context.Context) (eventlog.Seq, error) { return l.Log.Append(ctx, e, opts...) })
}

// AppendAll holds a chain with an event of the type as Append holds the
// event: the whole chain is answered late.
func (l *lateLog) AppendAll(ctx context.Context, evs []eventlog.Event, opts ...eventlog.AppendOpt) (eventlog.Seq, error) {
	i := slices.IndexFunc(evs, func(e eventlog.Event) bool { return e.Type == l.typ })
	if i < 0 {
		return l.Log.AppendAll(ctx, evs, opts...)
	}
	return l.late(ctx, evs[i], func(ctx context.Context) (eventlog.Seq, error) { return l.Log.AppendAll(ctx, evs, opts...) })
}

// late sends e (alone or in a chain: send) once the server answers.
func (l *lateLog) late(ctx context.Context, e eventlog.Event, send func(context.Context) (eventlog.Seq, error)) (eventlog.Seq, error) {
	l.mu.Lock()
	l.n++
	first := l.n == 1
	l.mu.Unlock()
	type result struct {
		seq eventlog.Seq
		err error
	}
	done := make(chan result, 1)
	l.wg.Add(1)
	go func() { // the message, in the server
		defer l.wg.Done()
		<-l.release
		seq, err := send(context.Background())
		l.mu.Lock()
		l.results = append(l.results, err)
		l.mu.Unlock()
		done <- result{seq, err}
	}()
	if first {
		l.once.Do(func() { close(l.held) })
		select {
		case r := <-done:
			return r.seq, r.err
		case <-l.deadline:
			return 0, fmt.Errorf("eventlog: append %s for %q: %w: %w", e.Type, e.Agent, eventlog.ErrUnconfirmed, context.DeadlineExceeded)
		}
	}
	select {
	case r := <-done:
		return r.seq, r.err
	case <-ctx.Done():
		return 0, fmt.Errorf("%w: %w", eventlog.ErrUnconfirmed, ctx.Err())
	}
}

// fibersNamed returns how many fibers of agent named name the log shows
// started, and the most of them live at once (started, not yet ended).
func fibersNamed(t *testing.T, lg *eventlog.Log, agent, name string) (started, live int) {
	t.Helper()
	evs, err := lg.Read(t.Context(), eventlog.Filter{Agent: agent}, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	open := map[string]bool{}
	for _, e := range evs {
		var d struct {
			ID   string `json:"id"`
			Name string `json:"name"`
		}
		if json.Unmarshal(e.Data, &d) != nil {
			continue
		}
		switch e.Type {
		case fiber.EventStarted:
			if d.Name == name {
				started++
				open[d.ID] = true
				live = max(live, len(open))
			}
		case fiber.EventCompleted, fiber.EventFailed, fiber.EventAbandoned:
			delete(open, d.ID)
		}
	}
	return started, live
}

// TestUnknownFate: a write whose fate is unknown holds what it claimed.
// A Send's turn.started (or its fiber's fiber.started) is sent and not
// answered before the caller's deadline, while JetStream elects a leader;
// the client sends the command again meanwhile. The turn keeps its slot
// until the write is settled, so the copy starts nothing (it waits, and is
// answered with the original once that is stored): one fiber,
// one turn, one outcome, and verify is clean.
func TestUnknownFate(t *testing.T) {
	for _, typ := range []string{chat.EventTurnStarted, fiber.EventStarted} {
		t.Run(typ, func(t *testing.T) {
			e := newEnv(t)
			late := newLateLog(t, e.lg, typ)
			e.writes = late
			h := e.host(t, "a1", &fake{scripts: []script{passLocal()}}, nil)
			req := chat.SendRequest{Text: "hello there", RequestID: "edge-1"}

			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			sent := make(chan error, 1)
			go func() {
				_, err := h.a.Send(ctx, req)
				sent <- err
			}()
			wait(t, late.held)
			close(late.deadline) // the caller's deadline passes
			cancel()
			if typ == chat.EventTurnStarted {
				if err := <-sent; !errors.Is(err, eventlog.ErrUnconfirmed) {
					t.Fatalf("Send whose turn.started was not answered: %v, want ErrUnconfirmed", err)
				}
			}
			// The client sends it again while the write is unsettled: the
			// copy waits for the write to settle, never starts a second
			// turn, and is answered with the original once it is stored (a
			// copy of a command whose fiber.started was unsettled may also
			// be refused as busy, 409, retryable). (Bounded only so that a
			// second turn, whose own write would wait for the server, fails
			// the test instead of hanging it.)
			type reply struct {
				turn chat.Turn
				err  error
			}
			copied := make(chan reply, 1)
			go func() {
				rctx, rcancel := context.WithTimeout(t.Context(), 30*time.Second)
				defer rcancel()
				turn, err := h.a.Send(rctx, req)
				copied <- reply{turn, err}
			}()
			close(late.release) // the election ends
			switch r := <-copied; {
			case r.err == nil && r.turn.RequestID == "edge-1":
			case typ == fiber.EventStarted && errors.Is(r.err, chat.ErrTurnActive):
			default:
				t.Fatalf("copy sent while the write is unsettled: %+v, %v; want the original turn", r.turn, r.err)
			}
			if typ == fiber.EventStarted {
				// Its turn.started went along its fiber.started (one
				// chain), so once the election ended both may be stored
				// and the caller, gone, answered with the turn, or with an
				// error: either way one turn (checked below).
				<-sent
			}
			h.r.Wait()
			again, err := h.a.Send(t.Context(), req)
			if err != nil || again.RequestID != "edge-1" {
				t.Fatalf("copy sent after: %+v, %v; want the turn", again, err)
			}
			h.r.Wait()
			late.wg.Wait()

			if got := turnsOf(t, e.lg, "a1"); len(got) != 1 || got["edge-1"] != 1 {
				t.Fatalf("turns per message = %v, want one", got)
			}
			if tr := lastTurn(t, e, "a1"); tr.RequestID != "edge-1" || tr.Status != chat.TurnCompleted {
				t.Fatalf("turn = %+v, want edge-1 completed", tr)
			}
			started, live := fibersNamed(t, e.lg, "a1", chat.TurnFiberPrefix+"edge-1")
			if live != 1 || (typ == chat.EventTurnStarted && started != 1) {
				t.Fatalf("%d fibers started for the turn, at most %d live at once; want one live at a time (and one in all when turn.started was unsettled)", started, live)
			}
			if rows := runs(t, e, "a1"); len(rows) != 0 {
				t.Fatalf("fibers left in the runs table: %+v", rows)
			}
			if _, text := streamOf(t, e.lg, "a1", lastTurn(t, e, "a1").StreamID); text != answer("hello there") {
				t.Fatalf("stream text %q", text)
			}
			rep, err := verify.Check(t.Context(), e.lg, verify.Options{Acked: []verify.Ack{{Agent: "a1", ID: "edge-1"}}})
			if err != nil || !rep.OK() {
				t.Fatalf("verify: %v\n%s", err, rep)
			}
			t.Logf("appends of %s answered: %v", typ, late.results)
		})
	}
}
