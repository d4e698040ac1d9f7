package chat_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"

	"github.com/forever-agents/forever/chat"
	"github.com/forever-agents/forever/chat/llm"
	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/fiber"
	"github.com/forever-agents/forever/verify"
)

// atAnnounced runs a host's turns at record format 9 (announced true:
// the usage stash carries an Idempotent call's op.started) or 8, beside
// opt.
func atAnnounced(announced bool, opt func(*chat.Config)) func(*chat.Config) {
	return func(c *chat.Config) {
		opt(c)
		c.AnnouncedStepsWritable = func() bool { return announced }
	}
}

// toolOps is what a turn's log holds of its tool calls' ops: the op.started
// events and their op ids by step key, the op ids the stashes announced by
// step key, and the op ids completed.
type toolOps struct {
	started   map[string]int
	startedOp map[string]string // key -> op id, from op.started
	announced map[string]string // key -> op id, from fiber.stashed
	completed map[string]bool   // op id
}

// opOf returns the op id of step key, started or announced.
func (o toolOps) opOf(key string) string {
	if id := o.startedOp[key]; id != "" {
		return id
	}
	return o.announced[key]
}

func readToolOps(t *testing.T, lg *eventlog.Log, agent string) toolOps {
	t.Helper()
	evs, err := lg.Read(t.Context(), eventlog.Filter{Agent: agent}, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	ops := toolOps{started: map[string]int{}, startedOp: map[string]string{}, announced: map[string]string{}, completed: map[string]bool{}}
	for _, e := range evs {
		var d struct {
			OpID     string `json:"opId"`
			Key      string `json:"key"`
			NextOpID string `json:"nextOpId"`
			NextKey  string `json:"nextKey"`
		}
		if json.Unmarshal(e.Data, &d) != nil {
			continue
		}
		switch e.Type {
		case fiber.EventOpStarted:
			ops.started[d.Key]++
			ops.startedOp[d.Key] = d.OpID
		case fiber.EventStashed:
			if d.NextOpID != "" {
				ops.announced[d.NextKey] = d.NextOpID
			}
		case fiber.EventOpCompleted:
			ops.completed[d.OpID] = true
		}
	}
	return ops
}

// TestAnnouncedStepsByFormat: at record format 9 the usage stash before a
// step's one Idempotent tool call carries that call's op.started
// (fiber.AnnounceStep) and the call writes none: one events record and
// one awaited write fewer; an Unsafe call keeps its own op.started. At
// format 8 every call writes its op.started. Either way each tool runs
// once, the answer is the same, and verify finds the log clean (it fails
// an op completed without a start it read).
func TestAnnouncedStepsByFormat(t *testing.T) {
	answers := map[bool]string{}
	for _, announced := range []bool{true, false} {
		t.Run(fmt.Sprintf("announced=%v", announced), func(t *testing.T) {
			e := newEnv(t)
			fx := newSideEffects()
			tools := withTools(t, fx.tool(t, "safe", chat.Idempotent), fx.tool(t, "risky", chat.Unsafe))
			h := e.host(t, "a1", llm.NewLocal(llm.LocalConfig{Rate: -1}), atAnnounced(announced, tools))
			if _, err := h.a.Send(t.Context(), chat.SendRequest{Text: twoTools}); err != nil {
				t.Fatal(err)
			}
			h.r.Wait()
			if tr := lastTurn(t, e, "a1"); tr.Status != chat.TurnCompleted {
				t.Fatalf("turn = %s %q", tr.Status, tr.Error)
			}
			msgs := settled(t, e, "a1")
			parts := toolParts(msgs[len(msgs)-1])
			if len(parts) != 2 {
				t.Fatalf("tool parts = %+v", parts)
			}
			safe, risky := "tool:"+parts[0].ToolCallID, "tool:"+parts[1].ToolCallID
			ops := readToolOps(t, e.lg, "a1")
			if !ops.completed[ops.opOf(safe)] || !ops.completed[ops.opOf(risky)] {
				t.Fatalf("ops %+v, want both calls started and completed", ops)
			}
			if ops.started[risky] != 1 || ops.announced[risky] != "" {
				t.Errorf("unsafe call: %d op.started, announced %q; want its own op.started", ops.started[risky], ops.announced[risky])
			}
			if announced {
				if ops.started[safe] != 0 || ops.announced[safe] == "" {
					t.Errorf("idempotent call at format 9: %d op.started, announced %q; want it announced by the stash, no op.started",
						ops.started[safe], ops.announced[safe])
				}
			} else if ops.started[safe] != 1 || len(ops.announced) != 0 {
				t.Errorf("format 8: idempotent call %d op.started, announced %v; want its own op.started, no announcement", ops.started[safe], ops.announced)
			}
			started, completed := fx.counts()
			for id, n := range started {
				if n != 1 || completed[id] != 1 {
					t.Errorf("call %s started %d, completed %d times", id, n, completed[id])
				}
			}
			if rep, err := verify.Check(t.Context(), e.lg, verify.Options{}); err != nil || !rep.OK() {
				t.Fatalf("verify: %v\n%s", err, rep)
			}
			answers[announced] = msgs[len(msgs)-1].Text()
		})
	}
	if answers[true] != answers[false] {
		t.Errorf("answers differ by format: %q and %q", answers[true], answers[false])
	}
}

// TestAnnouncedStepCrash: the process is killed before the stash that
// announces the Idempotent call's op.started, and before each of the two
// events writes after it (the call's op.completed once the tool ran, and
// the next step's usage stash), and a fresh process recovers: the turn
// completes with both outputs, the Idempotent tool ran at most twice with
// one idempotency key (the second run only when the first's result was not
// recorded), the Unsafe one exactly once, and verify is clean. The crash
// between the announcement and the tool (tools-begin) is
// TestToolCrashPoints' "before the first tool runs".
func TestAnnouncedStepCrash(t *testing.T) {
	// A run to the end finds the write that announces: the events writes
	// before it are its budget.
	at := -1
	{
		e := newEnv(t)
		fx := newSideEffects()
		tools := withTools(t, fx.tool(t, "safe", chat.Idempotent), fx.tool(t, "risky", chat.Unsafe))
		c := &counting{lg: e.lg, announcedAt: -1}
		e.writes = c
		h := e.host(t, "a1", llm.NewLocal(llm.LocalConfig{Rate: -1}), atAnnounced(true, tools))
		if _, err := h.a.Send(t.Context(), chat.SendRequest{Text: twoTools}); err != nil {
			t.Fatal(err)
		}
		h.r.Wait()
		c.mu.Lock()
		at = c.announcedAt
		c.mu.Unlock()
		if at < 0 {
			t.Fatal("no stash announced a step")
		}
	}
	for budget := at; budget <= at+2; budget++ {
		t.Run(fmt.Sprintf("after %d writes", budget), func(t *testing.T) {
			e1 := newEnv(t)
			d := newDying(e1.lg, e1.batcher, budget)
			e1.writes, e1.chunks = d, d
			fx := newSideEffects()
			tools := withTools(t, fx.tool(t, "safe", chat.Idempotent), fx.tool(t, "risky", chat.Unsafe))
			local := llm.NewLocal(llm.LocalConfig{Rate: -1})
			h1 := e1.host(t, "a1", local, atAnnounced(true, tools))
			if _, err := h1.a.Send(t.Context(), chat.SendRequest{Text: twoTools}); err != nil {
				t.Fatal(err)
			}
			<-d.blocked
			d.kill()
			h1.r.Close()

			e2 := newEnvOn(t, e1.srv, eventlog.Config{})
			recoverHost(t, e2, "a1", local, atAnnounced(true, tools))
			if tr := lastTurn(t, e2, "a1"); tr.Status != chat.TurnCompleted {
				t.Fatalf("turn = %s %q", tr.Status, tr.Error)
			}
			msgs := settled(t, e2, "a1")
			parts := toolParts(msgs[len(msgs)-1])
			if len(parts) != 2 || parts[0].State != chat.ToolOutput || parts[1].State != chat.ToolOutput {
				t.Fatalf("tool parts = %+v, want both outputs", parts)
			}
			started, completed := fx.counts()
			safe, risky := parts[0].ToolCallID, parts[1].ToolCallID
			if completed[safe] < 1 || completed[safe] > 2 {
				t.Errorf("idempotent tool completed %d times, want 1 or 2 (rerun once, same key)", completed[safe])
			}
			if started[risky] != 1 || completed[risky] != 1 {
				t.Errorf("unsafe tool started %d, completed %d times, want once", started[risky], completed[risky])
			}
			if rep, err := verify.Check(t.Context(), e2.lg, verify.Options{}); err != nil || !rep.OK() {
				t.Fatalf("verify: %v\n%s", err, rep)
			}
		})
	}
}

// counting is a write log that notes how many events writes came before
// the first stash that announces a step (announcedAt, -1: none).
type counting struct {
	lg          *eventlog.Log
	mu          sync.Mutex
	n           int
	announcedAt int
	seen        bool
}

func (c *counting) Append(ctx context.Context, e eventlog.Event, opts ...eventlog.AppendOpt) (eventlog.Seq, error) {
	c.note(e)
	return c.lg.Append(ctx, e, opts...)
}

func (c *counting) Read(ctx context.Context, f eventlog.Filter, after eventlog.Seq, limit int) ([]eventlog.Event, error) {
	return c.lg.Read(ctx, f, after, limit)
}

func (c *counting) LastSeq(ctx context.Context, f eventlog.Filter) (eventlog.Seq, error) {
	return c.lg.LastSeq(ctx, f)
}

func (c *counting) note(e eventlog.Event) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.seen && e.Type == fiber.EventStashed {
		var d struct {
			NextOpID string `json:"nextOpId"`
		}
		if json.Unmarshal(e.Data, &d) == nil && d.NextOpID != "" {
			c.announcedAt, c.seen = c.n, true
		}
	}
	c.n++
}
