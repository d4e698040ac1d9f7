package chat_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/forever-agents/forever/chat"
	"github.com/forever-agents/forever/chat/chunk"
	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/verify"
)

// errDead is what a write of a killed process gets; it never reaches the
// log.
var errDead = errors.New("test: the process is dead")

// dying is the log of a process that dies at its (budget+1)th write: that
// write blocks, as a process killed just before it would have sent it,
// until the test kills the process; from then on every write, chunks
// included, fails with errDead and stores nothing. Reads go through.
type dying struct {
	lg     *eventlog.Log
	chunks chunk.Batcher

	mu      sync.Mutex
	budget  int  // writes still allowed
	dead    bool // killed: nothing more is written
	blocked chan struct{}
	killed  chan struct{}
	once    sync.Once
}

func newDying(lg *eventlog.Log, chunks chunk.Batcher, budget int) *dying {
	return &dying{lg: lg, chunks: chunks, budget: budget, blocked: make(chan struct{}), killed: make(chan struct{})}
}

// write takes one write from the budget, or blocks the caller until the
// kill (or its ctx ends) and returns why it may not write.
func (d *dying) write(ctx context.Context) error {
	d.mu.Lock()
	if !d.dead && d.budget > 0 {
		d.budget--
		d.mu.Unlock()
		return nil
	}
	dead := d.dead
	d.mu.Unlock()
	if dead {
		return errDead
	}
	d.once.Do(func() { close(d.blocked) })
	select {
	case <-d.killed:
		return errDead
	case <-ctx.Done():
		return ctx.Err()
	}
}

// kill kills the process: blocked and later writes fail.
func (d *dying) kill() {
	d.mu.Lock()
	if !d.dead {
		d.dead = true
		close(d.killed)
	}
	d.mu.Unlock()
}

func (d *dying) Append(ctx context.Context, e eventlog.Event, opts ...eventlog.AppendOpt) (eventlog.Seq, error) {
	if err := d.write(ctx); err != nil {
		return 0, err
	}
	return d.lg.Append(ctx, e, opts...)
}

func (d *dying) Read(ctx context.Context, f eventlog.Filter, after eventlog.Seq, limit int) ([]eventlog.Event, error) {
	return d.lg.Read(ctx, f, after, limit)
}

func (d *dying) LastSeq(ctx context.Context, f eventlog.Filter) (eventlog.Seq, error) {
	return d.lg.LastSeq(ctx, f)
}

// Add queues a chunk unless the process is dead; chunks do not count
// against the budget (Send writes none).
func (d *dying) Add(ctx context.Context, e eventlog.Event, opts ...eventlog.AddOption) (*eventlog.Pending, error) {
	d.mu.Lock()
	dead := d.dead
	d.mu.Unlock()
	if dead {
		return nil, errDead
	}
	return d.chunks.Add(ctx, e, opts...)
}

// Replace merges into a queued chunk unless the process is dead.
func (d *dying) Replace(p *eventlog.Pending, data json.RawMessage) (bool, error) {
	d.mu.Lock()
	dead := d.dead
	d.mu.Unlock()
	if dead {
		return false, errDead
	}
	return d.chunks.Replace(p, data)
}

// TestSendCrashPoints: a chat command is atomic. The process is killed
// before each write in turn, from Send's first to the turn's later ones,
// and a fresh process on the same server recovers: every stored user
// message then has a turn that ran to its end (one outcome, its stream
// ended), an acknowledged Send's turn completed with the answer, and a
// Send killed before it stored anything left nothing in the conversation.
func TestSendCrashPoints(t *testing.T) {
	const prompt = "tell me a story"
	for budget := range 6 {
		t.Run(fmt.Sprintf("after %d writes", budget), func(t *testing.T) {
			e1 := newEnv(t)
			d := newDying(e1.lg, e1.batcher, budget)
			e1.writes, e1.chunks = d, d
			h1 := e1.host(t, "a1", &fake{scripts: []script{passLocal()}}, nil)
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			type result struct {
				turn chat.Turn
				err  error
			}
			sent := make(chan result, 1)
			go func() {
				turn, err := h1.a.Send(ctx, chat.SendRequest{Text: prompt})
				sent <- result{turn, err}
			}()
			ran := make(chan struct{})
			go func() {
				defer close(ran)
				r := <-sent
				sent <- r
				if r.err == nil {
					h1.r.Wait()
				}
			}()
			select { // killed at the blocked write, or after the turn ended
			case <-d.blocked:
			case <-ran:
			}
			d.kill()
			h1.r.Close()
			cancel()
			res := <-sent
			t.Logf("Send: %+v, %v", res.turn, res.err)

			e2 := newEnvOn(t, e1.srv, eventlog.Config{})
			h2 := e2.host(t, "a1", &fake{scripts: []script{passLocal()}}, nil)
			if err := h2.r.Recover(t.Context()); err != nil {
				t.Fatal(err)
			}
			h2.r.Wait()

			turns := everyUserMessageAnswered(t, e2.lg, "a1")
			if rep, err := verify.Check(t.Context(), e2.lg, verify.Options{}); err != nil || !rep.OK() {
				t.Fatalf("verify: %v\n%s", err, rep)
			}
			switch {
			case res.err == nil:
				tr, ok := turns[res.turn.RequestID]
				if !ok || tr.outcome != chat.EventTurnCompleted {
					t.Fatalf("acknowledged turn %s: %+v", res.turn.RequestID, tr)
				}
				if _, text := streamOf(t, e2.lg, "a1", res.turn.StreamID); text != answer(prompt) {
					t.Fatalf("acknowledged turn's stream text %q", text)
				}
			case len(turns) == 0:
				// Killed before the command was stored: nothing is.
			default:
				for _, tr := range turns {
					if tr.outcome != chat.EventTurnCompleted {
						t.Fatalf("stored turn ended %s, want it run to its end", tr.outcome)
					}
					// The model saw the question: the turn answered it.
					if _, text := streamOf(t, e2.lg, "a1", tr.stream); text != answer(prompt) {
						t.Fatalf("stored turn's stream text %q", text)
					}
				}
			}
		})
	}
}

// storedTurn is what the log holds of one turn.
type storedTurn struct {
	message  string // the user message it answers
	stream   string
	outcome  string // its one outcome event type
	terminal string // its stream's terminal chunk type
}

// everyUserMessageAnswered reads agent's events and chunks straight from
// the log and fails the test unless every stored user message has a turn
// with exactly one outcome whose stream has exactly one terminal chunk,
// the last. It returns the turns by request id.
func everyUserMessageAnswered(t *testing.T, lg *eventlog.Log, agent string) map[string]*storedTurn {
	t.Helper()
	evs, err := lg.Read(t.Context(), eventlog.Filter{Agent: agent}, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	turns := map[string]*storedTurn{}
	byMessage := map[string]string{}
	var users []string
	for _, e := range evs {
		var d struct {
			ID        string `json:"id"`
			Role      string `json:"role"`
			RequestID string `json:"requestId"`
			StreamID  string `json:"streamId"`
			MessageID string `json:"messageId"`
		}
		if err := json.Unmarshal(e.Data, &d); err != nil {
			continue
		}
		switch e.Type {
		case chat.EventMessageAppended:
			if d.Role == chat.RoleUser {
				users = append(users, d.ID)
			}
		case chat.EventTurnStarted:
			// A turn.started that carries its user message stores both.
			turns[d.RequestID] = &storedTurn{message: d.MessageID, stream: d.StreamID}
			if d.MessageID != "" {
				byMessage[d.MessageID] = d.RequestID
			}
		case chat.EventTurnCompleted, chat.EventTurnFailed, chat.EventTurnInterrupted:
			tr := turns[d.RequestID]
			switch {
			case tr == nil:
				t.Errorf("%s of a turn %s never started", e.Type, d.RequestID)
			case tr.outcome != "":
				t.Errorf("turn %s: %s after its %s", d.RequestID, e.Type, tr.outcome)
			default:
				tr.outcome = e.Type
			}
		}
	}
	for _, id := range users {
		rid, ok := byMessage[id]
		if !ok {
			t.Errorf("user message %s has no turn", id)
			continue
		}
		if turns[rid].outcome == "" {
			t.Errorf("user message %s: its turn %s has no outcome", id, rid)
		}
	}
	for rid, tr := range turns {
		cs := readChunks(t, lg, agent, tr.stream)
		for i, c := range cs {
			if !c.Terminal() {
				continue
			}
			if tr.terminal != "" || i != len(cs)-1 {
				t.Errorf("turn %s: stream %s has a %s chunk at %d of %d after %q", rid, tr.stream, c.Type, i, len(cs), tr.terminal)
			}
			tr.terminal = c.Type
		}
		if tr.outcome != "" && tr.terminal == "" {
			t.Errorf("turn %s recorded %s but its stream %s has no terminal chunk", rid, tr.outcome, tr.stream)
		}
	}
	return turns
}
