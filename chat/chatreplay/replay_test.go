package chatreplay_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"iter"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/forever-agents/forever/chat"
	"github.com/forever-agents/forever/chat/chatreplay"
	"github.com/forever-agents/forever/chat/llm"
	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/eventlog/eventlogtest"
	"github.com/forever-agents/forever/fiber"
)

// toolRuns counts the runs of the test agent type's tools: a replay runs
// none.
var toolRuns atomic.Int64

type cityIn struct {
	City string `json:"city"`
}

type weatherOut struct {
	City string `json:"city"`
	Temp int    `json:"temp"`
}

type clockOut struct {
	Now string `json:"now"`
}

// weatherAgent is the test agent type: a chat agent whose weather tool is
// chosen by a flag, as a rollout switches an agent type to a new tool
// (v2: "forecast" instead of "weather"). approve makes the weather tool
// ask for approval before it runs. Its clock tool tells a different time
// at every call, which a replay must not see.
func weatherAgent(t *testing.T, v2, approve bool) func(*chat.Config) {
	t.Helper()
	name := "weather"
	if v2 {
		name = "forecast"
	}
	var opts []chat.ToolOption
	if approve {
		opts = append(opts, chat.WithApproval(func(json.RawMessage) bool { return true }))
	}
	weather, err := chat.NewTool(name, "Current weather of a city.", func(_ context.Context, in cityIn) (weatherOut, error) {
		toolRuns.Add(1)
		return weatherOut{City: in.City, Temp: 21}, nil
	}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	clock, err := chat.NewTool("clock", "Tells the time.", func(context.Context, struct{}) (clockOut, error) {
		toolRuns.Add(1)
		return clockOut{Now: time.Now().UTC().Format(time.RFC3339Nano)}, nil
	}, chat.WithSafety(chat.Idempotent))
	if err != nil {
		t.Fatal(err)
	}
	tools, err := chat.NewTools(weather, clock)
	if err != nil {
		t.Fatal(err)
	}
	return func(c *chat.Config) {
		c.System = "You tell the weather."
		c.Tools = tools
	}
}

// conversation is what the recorded user says: a tool call, a call of the
// tool the flag changes (with a clock call in the same step), and a
// message without tools.
var conversation = []string{
	"/tool clock {}",
	"/tool weather {\"city\":\"Paris\"}\n+/tool clock {}",
	"thanks",
}

// record runs texts as turns of agent (the local model, configure's
// tools) on a real embedded nats-server and returns the log's recording.
func record(t *testing.T, agent string, configure func(*chat.Config), texts ...string) *chatreplay.Recording {
	t.Helper()
	var steps []func(context.Context, *chat.Agent) error
	for _, text := range texts {
		steps = append(steps, func(ctx context.Context, a *chat.Agent) error {
			_, err := a.Send(ctx, chat.SendRequest{Text: text})
			return err
		})
	}
	return recordSteps(t, agent, configure, steps...)
}

// approveWaiting approves the calls waiting for approval in the last
// message of a.
func approveWaiting(ctx context.Context, a *chat.Agent) error {
	msgs, _, err := a.Messages(chat.Page{})
	if err != nil {
		return err
	}
	yes := true
	var answers []chat.ToolAnswer
	for _, p := range msgs[len(msgs)-1].Parts {
		if p.State == chat.ToolApprovalRequested {
			answers = append(answers, chat.ToolAnswer{CallID: p.ToolCallID, Approved: &yes})
		}
	}
	if len(answers) == 0 {
		return errors.New("no call waits for approval")
	}
	_, err = a.Answer(ctx, answers, nil)
	return err
}

// recordSteps runs steps (sends, answers) on agent, each turn to its end,
// and returns the log's recording.
func recordSteps(t *testing.T, agent string, configure func(*chat.Config), steps ...func(context.Context, *chat.Agent) error) *chatreplay.Recording {
	t.Helper()
	ctx := t.Context()
	lg := eventlogtest.OpenOn(t, eventlogtest.RunServer(t, eventlogtest.ServerOptions{}), eventlog.Config{})
	table, tpr, err := fiber.OpenTable(lg)
	if err != nil {
		t.Fatal(err)
	}
	eventlogtest.RunProjector(t, tpr)
	store, prs, err := chat.OpenStore(lg)
	if err != nil {
		t.Fatal(err)
	}
	for _, pr := range prs {
		eventlogtest.RunProjector(t, pr)
	}
	b := lg.NewBatcher(eventlog.BatcherConfig{})
	bctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Run(bctx) }()
	t.Cleanup(func() { cancel(); <-done })
	r, err := fiber.New(fiber.Config{Log: lg, Table: table, Agent: agent})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	cfg := chat.Config{Agent: agent, Log: lg, Store: store, Batcher: b, MaxPayload: lg.MaxPayload(), Fibers: r,
		Provider: llm.NewLocal(llm.LocalConfig{Rate: -1})}
	configure(&cfg)
	a, err := chat.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, step := range steps {
		if err := step(ctx, a); err != nil {
			t.Fatal(err)
		}
		r.Wait()
	}
	rec, err := chatreplay.Read(ctx, lg, agent)
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

// TestReplay: a recorded conversation with tool calls replays with no
// difference through the code that recorded it, and the first differing
// tool call is reported once the agent type's flag changes its tools.
func TestReplay(t *testing.T) {
	rec := record(t, "w1", weatherAgent(t, false, false), conversation...)
	if len(rec.Events) == 0 || len(rec.Chunks) == 0 {
		t.Fatalf("recording: %d events, %d chunks", len(rec.Events), len(rec.Chunks))
	}
	for _, c := range []struct {
		name      string
		configure func(*chat.Config)
		// want is, per turn, "same" or a part of the difference.
		want []string
	}{
		{name: "same code", configure: weatherAgent(t, false, false), want: []string{"same", "same", "same"}},
		{name: "tool renamed", configure: weatherAgent(t, true, false),
			want: []string{"same", `differs: model call 1: the recorded model called weather {"city":"Paris"} (call_`, "same"}},
		{name: "tool needs approval", configure: weatherAgent(t, false, true),
			want: []string{"same", "differs: tool event 3: recorded output of call_", "same"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			runs := toolRuns.Load()
			got, err := chatreplay.Run(t.Context(), rec, chatreplay.Options{Configure: c.configure})
			if err != nil {
				t.Fatal(err)
			}
			if n := toolRuns.Load() - runs; n != 0 {
				t.Errorf("the replay ran %d tool calls, want none", n)
			}
			if len(got) != len(c.want) {
				t.Fatalf("results = %v, want %d", got, len(c.want))
			}
			for i, r := range got {
				t.Logf("turn %d: %s", i+1, r)
				if s := r.String(); !strings.HasPrefix(s, c.want[i]) {
					t.Errorf("turn %d (%s): %s, want %s", i+1, r.RequestID, s, c.want[i])
				}
				if r.Same() != (c.want[i] == "same") {
					t.Errorf("turn %d: Same() = %v", i+1, r.Same())
				}
			}
		})
	}
}

// TestReplayFile: a recording kept in a file (Write, Load) replays the
// same, and Turn reports one turn.
func TestReplayFile(t *testing.T) {
	rec := record(t, "w2", weatherAgent(t, false, false), conversation...)
	var buf bytes.Buffer
	if err := rec.Write(&buf); err != nil {
		t.Fatal(err)
	}
	loaded, err := chatreplay.Load(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if loaded.Agent != "w2" || len(loaded.Events) != len(rec.Events) || len(loaded.Chunks) != len(rec.Chunks) {
		t.Fatalf("loaded %s: %d events, %d chunks; want w2, %d, %d", loaded.Agent, len(loaded.Events), len(loaded.Chunks), len(rec.Events), len(rec.Chunks))
	}
	all, err := chatreplay.Run(t.Context(), loaded, chatreplay.Options{Configure: weatherAgent(t, true, false)})
	if err != nil || len(all) != 3 {
		t.Fatalf("Run = %v, %v", all, err)
	}
	second := all[1].RequestID
	got, err := chatreplay.Run(t.Context(), loaded, chatreplay.Options{Configure: weatherAgent(t, true, false), Turn: second})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].RequestID != second || got[0].Same() {
		t.Fatalf("Run(Turn: %s) = %v", second, got)
	}
	if _, err := chatreplay.Run(t.Context(), loaded, chatreplay.Options{Turn: "nope"}); !errors.Is(err, chatreplay.ErrNoTurn) {
		t.Fatalf("Run(Turn: nope) = %v, want ErrNoTurn", err)
	}
}

// TestReplayAnswers: a call that waited for approval and ran once approved
// (a turn answering it) replays the same, and without the approval rule
// the first turn runs the call itself and the answer differs.
func TestReplayAnswers(t *testing.T) {
	send := func(text string) func(context.Context, *chat.Agent) error {
		return func(ctx context.Context, a *chat.Agent) error {
			_, err := a.Send(ctx, chat.SendRequest{Text: text})
			return err
		}
	}
	rec := recordSteps(t, "w3", weatherAgent(t, false, true), send(conversation[1]), approveWaiting, send("thanks"))
	got, err := chatreplay.Run(t.Context(), rec, chatreplay.Options{Configure: weatherAgent(t, false, true)})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || !got[0].Same() || !got[1].Same() || !got[2].Same() {
		t.Fatalf("same code: %v", got)
	}
	got, err = chatreplay.Run(t.Context(), rec, chatreplay.Options{Configure: weatherAgent(t, false, false)})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || !strings.HasPrefix(got[0].String(), "differs: tool event 3: recorded approval request of call_") {
		t.Fatalf("without approval: %v", got)
	}
	t.Logf("without approval: %v", got)
}

// failing is a model that fails, terminally, every call whose last message
// asks it to ("/fail"), and otherwise is p.
type failing struct{ llm.Provider }

func (f failing) Stream(ctx context.Context, req llm.Request) iter.Seq2[llm.Delta, error] {
	if n := len(req.Messages); n > 0 && len(req.Messages[n-1].Parts) > 0 && req.Messages[n-1].Parts[0].Text == "/fail" {
		return func(yield func(llm.Delta, error) bool) {
			yield(llm.Delta{}, &llm.Error{Provider: "failing", Err: errors.New("the model is down")})
		}
	}
	return f.Provider.Stream(ctx, req)
}

// TestReplayFailed: a turn the model failed replays its recorded failure,
// without the failing model.
func TestReplayFailed(t *testing.T) {
	agent := weatherAgent(t, false, false)
	rec := record(t, "w4", func(c *chat.Config) { agent(c); c.Provider = failing{c.Provider} }, "/fail", "/tool clock {}")
	if !slices.ContainsFunc(rec.Events, func(e eventlog.Event) bool { return e.Type == "turn.failed" }) {
		t.Fatal("the recording holds no failed turn")
	}
	got, err := chatreplay.Run(t.Context(), rec, chatreplay.Options{Configure: agent})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || !got[0].Same() || !got[1].Same() {
		t.Fatalf("results = %v", got)
	}
}

// TestReplayAcrossFormats: a conversation recorded at record formats 8
// and 11 (a turn's answer and usage in its turn.completed, which carries
// its fiber's end too) replays the same at formats 7 and 10 (a
// message.appended and a usage.recorded of their own, and a
// fiber.completed), and one recorded at 7 and 10 the same at 8 and 11:
// turns are compared as format 7 stores them (chat.SplitEnd).
func TestReplayAcrossFormats(t *testing.T) {
	at := func(end bool) func(*chat.Config) {
		agent := weatherAgent(t, false, false)
		return func(c *chat.Config) {
			agent(c)
			c.EndRecordsWritable = func() bool { return end }
			// Formats 8 and 11 go together, 7 and 10: the fiber's end a
			// turn.completed carries is not the turn's to compare.
			c.InlineEndsWritable = func() bool { return end }
		}
	}
	for _, recorded := range []bool{true, false} {
		rec := record(t, map[bool]string{true: "x8", false: "x7"}[recorded], at(recorded), conversation...)
		got, err := chatreplay.Run(t.Context(), rec, chatreplay.Options{Configure: at(!recorded)})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(conversation) {
			t.Fatalf("recorded with end records %v: results %v", recorded, got)
		}
		for i, r := range got {
			if !r.Same() {
				t.Errorf("recorded with end records %v, replayed with %v: turn %d: %s", recorded, !recorded, i+1, r)
			}
		}
	}
}
