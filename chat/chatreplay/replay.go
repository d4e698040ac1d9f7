package chatreplay

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"reflect"
	"strings"
	"sync"
	"time"

	"github.com/forever-agents/forever/chat"
	"github.com/forever-agents/forever/chat/chunk"
	"github.com/forever-agents/forever/chat/llm"
	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/fiber"
)

// ErrNoTurn is returned by Run when Options.Turn names no turn of the
// recording.
var ErrNoTurn = errors.New("chatreplay: the recording has no turn with this request id")

// Options configure Run.
type Options struct {
	// Configure is the agent type's code under test, as it configures its
	// chat agents (chathost.NewType's tweak): tools, system prompt, model,
	// step limits, a provider wrapped in the type's own logic. It is
	// called with the Config of the replayed agent, whose Provider is the
	// recorded model; its tools are then answered from the recording.
	// Nil: a chat agent without tools.
	Configure func(*chat.Config)
	// Turn, when set, is the request id of the only turn reported. The
	// turns before it are replayed too, silently: they build its
	// conversation.
	Turn string
	// Logger receives the throwaway agent's logs; nil: discarded.
	Logger *slog.Logger
}

// A Result is the outcome of one recorded turn.
type Result struct {
	// RequestID is the turn's request id.
	RequestID string
	// Diff is the first difference between the recorded turn and its
	// replay; "" when they are the same.
	Diff string
	// Skipped says why the turn was not replayed; "" when it was.
	Skipped string
}

// Same reports whether the turn was replayed without a difference.
func (r Result) Same() bool { return r.Diff == "" && r.Skipped == "" }

// String is "same", "differs: <first difference>" or "skipped: <why>".
func (r Result) String() string {
	switch {
	case r.Skipped != "":
		return "skipped: " + r.Skipped
	case r.Diff != "":
		return "differs: " + r.Diff
	}
	return "same"
}

// turnTimeout bounds one replayed turn: no model and no tool waits, so a
// turn that takes longer is stuck.
const turnTimeout = time.Minute

// Run replays rec's turns, in order, through the current code of the chat
// package and opts.Configure: each recorded user message is sent to a
// fresh agent of the same id on a throwaway log (an embedded nats-server
// and Pebble in a temporary directory), whose model answers each call with
// what the recorded model streamed in that step, and whose server tools
// answer each call with the recorded result (a call the recording does
// not hold, or with another input, is a difference). Nothing reaches a
// model, runs a tool, or is written to the recording's log. The turns
// that continue an earlier answer or answer tool calls are skipped.
//
// It returns one Result per turn (only opts.Turn's when set, or
// ErrNoTurn).
func Run(ctx context.Context, rec *Recording, opts Options) ([]Result, error) {
	ts := turns(rec)
	if opts.Turn != "" && !hasTurn(ts, opts.Turn) {
		return nil, fmt.Errorf("%w: %q", ErrNoTurn, opts.Turn)
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	sb, err := openSandbox(ctx, logger)
	if err != nil {
		return nil, err
	}
	defer sb.close()
	model := &recordedModel{}
	fr, err := fiber.New(fiber.Config{Log: sb.lg, Table: sb.table, Agent: rec.Agent, Logger: logger, BackoffBase: time.Millisecond})
	if err != nil {
		return nil, err
	}
	defer fr.Close()
	cfg := chat.Config{
		Agent: rec.Agent, Log: sb.lg, Store: sb.store, Batcher: sb.batcher, MaxPayload: sb.lg.MaxPayload(),
		Fibers: fr, Provider: model, Logger: logger, RetryBackoff: time.Millisecond,
	}
	if opts.Configure != nil {
		opts.Configure(&cfg)
	}
	// The replay's parts stay the replay's, whatever Configure set.
	cfg.Agent, cfg.Log, cfg.Store, cfg.Batcher, cfg.Fibers = rec.Agent, sb.lg, sb.store, sb.batcher, fr
	cfg.Peers, cfg.Blobs, cfg.OnState, cfg.Registerer, cfg.TracerProvider = nil, nil, nil, nil, nil
	calls := &recordedTools{}
	if cfg.Tools, err = calls.wrap(cfg.Tools); err != nil {
		return nil, err
	}
	a, err := chat.New(cfg)
	if err != nil {
		return nil, err
	}
	var out []Result
	for _, t := range ts {
		report := opts.Turn == "" || opts.Turn == t.start.RequestID
		if t.skip != "" {
			if report {
				out = append(out, Result{RequestID: t.start.RequestID, Skipped: t.skip})
			}
			continue
		}
		diff, err := replayTurn(ctx, sb, a, fr, model, calls, t)
		if err != nil {
			return out, err
		}
		if report {
			out = append(out, Result{RequestID: t.start.RequestID, Diff: diff})
		}
		if opts.Turn == t.start.RequestID {
			break
		}
	}
	return out, nil
}

// hasTurn reports whether ts holds the turn of request id.
func hasTurn(ts []*turn, id string) bool {
	for _, t := range ts {
		if t.start.RequestID == id {
			return true
		}
	}
	return false
}

// replayTurn sends t's user message to a, waits for the turn to end, and
// returns the first difference from the recording ("" when none).
func replayTurn(ctx context.Context, sb *sandbox, a *chat.Agent, fr *fiber.Runner, model *recordedModel, calls *recordedTools, t *turn) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, turnTimeout)
	defer cancel()
	before, err := sb.lg.LastSeq(ctx, eventlog.Filter{Agent: a.ID()})
	if err != nil {
		return "", err
	}
	model.set(t.steps)
	calls.set(t.calls)
	var turn chat.Turn
	if len(t.start.Answers) > 0 {
		turn, err = a.Answer(ctx, t.start.Answers, t.start.Body)
	} else {
		msg := *t.message
		msg.Role = "user"
		turn, err = a.Send(ctx, chat.SendRequest{Message: &msg, RequestID: t.start.RequestID, Body: t.start.Body, Tools: t.start.Tools})
	}
	if err != nil {
		return notStarted(err), nil
	}
	waited := make(chan struct{})
	go func() { fr.Wait(); close(waited) }()
	select {
	case <-waited:
	case <-ctx.Done():
		return "", fmt.Errorf("chatreplay: turn %s did not end within %v", t.start.RequestID, turnTimeout)
	}
	evs, err := readAll(ctx, sb.lg, eventlog.Filter{Agent: a.ID()})
	if err != nil {
		return "", err
	}
	var got []eventlog.Event
	for _, e := range evs {
		if e.Seq > before && comparable(e) {
			got = append(got, chat.SplitEnd(e)...)
		}
	}
	cevs, err := readAll(ctx, sb.lg, eventlog.Filter{Agent: a.ID(), Stream: turn.StreamID})
	if err != nil {
		return "", err
	}
	var chunks []chunk.Chunk
	for _, e := range cevs {
		var c chunk.Chunk
		if json.Unmarshal(e.Data, &c) == nil {
			chunks = append(chunks, c)
		}
	}
	if d := calls.first(); d != "" {
		return d, nil
	}
	unoffered, extra := model.diffs()
	if unoffered != "" {
		return unoffered, nil
	}
	if d := diffToolCalls(t.chunks, chunks); d != "" {
		return d, nil
	}
	if extra != "" {
		return extra, nil
	}
	return diffEvents(t.events, got), nil
}

// notStarted is the difference of a recorded turn the new code did not
// start.
func notStarted(err error) string {
	switch {
	case errors.Is(err, chat.ErrAlreadyAnswered), errors.Is(err, chat.ErrUnknownToolCall):
		return "the recorded answers do not fit the calls the replayed turns left waiting"
	case errors.Is(err, chat.ErrTurnActive):
		return "the replayed turn before it had not ended"
	}
	return "the turn did not start: " + err.Error()
}

// recordedModel is the model of a replay: each call of a turn streams what
// the recorded model streamed in that step.
type recordedModel struct {
	mu    sync.Mutex
	steps []recordedStep
	next  int
	// unoffered is a recorded call of a tool the new code does not offer;
	// extra a model call beyond the recorded ones.
	unoffered, extra string
}

func (m *recordedModel) set(steps []recordedStep) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.steps, m.next, m.unoffered, m.extra = steps, 0, "", ""
}

func (m *recordedModel) diffs() (unoffered, extra string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.unoffered, m.extra
}

// Name is "replay".
func (m *recordedModel) Name() string { return "replay" }

// ResumesByID is false: a replay has no response to resume.
func (m *recordedModel) ResumesByID() bool { return false }

// Stream streams the next recorded step.
func (m *recordedModel) Stream(ctx context.Context, req llm.Request) iter.Seq2[llm.Delta, error] {
	m.mu.Lock()
	n := m.next
	m.next++
	var step *recordedStep
	if n < len(m.steps) {
		step = &m.steps[n]
	} else if m.extra == "" {
		m.extra = fmt.Sprintf("model call %d: the recorded turn called the model %d times only", n+1, len(m.steps))
	}
	if step != nil && m.unoffered == "" {
		m.unoffered = unoffered(n+1, step.deltas, req.Tools)
	}
	m.mu.Unlock()
	return func(yield func(llm.Delta, error) bool) {
		if step == nil {
			yield(llm.Delta{}, &llm.Error{Provider: "replay", Err: errors.New("no recorded model output for this call")})
			return
		}
		for _, d := range step.deltas {
			if ctx.Err() != nil {
				yield(llm.Delta{}, ctx.Err())
				return
			}
			if !yield(d, nil) {
				return
			}
		}
		if step.err != "" {
			// The recorded failure, terminal as it was.
			yield(llm.Delta{}, &llm.Error{Provider: "replay", Err: errors.New(step.err)})
		}
	}
}

// unoffered is the difference of a recorded step calling a tool the
// request does not offer (the new code's tools and the client's), "" when
// every call names an offered tool.
func unoffered(call int, step []llm.Delta, offered []llm.Tool) string {
	names := map[string]bool{}
	for _, t := range offered {
		names[t.Name] = true
	}
	for _, d := range step {
		if d.Kind == llm.ToolCallDone && !names[d.ToolName] {
			return fmt.Sprintf("model call %d: the recorded model called %s %s (%s), a tool the new code does not offer", call, d.ToolName, compact(d.Input), d.ToolCallID)
		}
	}
	return ""
}

// recordedTools answers a replay's server tool calls with the recorded
// results of the current turn.
type recordedTools struct {
	mu    sync.Mutex
	calls map[string]*recordedCall
	diff  string
}

func (rt *recordedTools) set(calls map[string]*recordedCall) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	rt.calls, rt.diff = calls, ""
}

func (rt *recordedTools) first() string {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return rt.diff
}

// differs records d unless a difference was recorded already, and returns
// it as the call's error.
func (rt *recordedTools) differs(d string) error {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if rt.diff == "" {
		rt.diff = d
	}
	return errors.New("replay: " + d)
}

// wrap returns ts with every tool answering from the recording.
func (rt *recordedTools) wrap(ts *chat.Tools) (*chat.Tools, error) {
	var wrapped []*chat.Tool
	for _, def := range ts.Defs() {
		t, _ := ts.Lookup(def.Name)
		name := def.Name
		wrapped = append(wrapped, t.WithFunc(func(ctx context.Context, input json.RawMessage) (json.RawMessage, error) {
			return rt.answer(ctx, name, input)
		}))
	}
	return chat.NewTools(wrapped...)
}

// answer is the recorded result of the call in ctx, or a difference.
func (rt *recordedTools) answer(ctx context.Context, name string, input json.RawMessage) (json.RawMessage, error) {
	call, _ := chat.ToolCallFrom(ctx)
	rt.mu.Lock()
	rc := rt.calls[call.CallID]
	rt.mu.Unlock()
	switch {
	case rc == nil || !rc.ran:
		return nil, rt.differs(fmt.Sprintf("tool call %s: the new code called %s %s, which the recorded turn did not run", call.CallID, name, compact(input)))
	case rc.name != name || !sameJSON(rc.input, input):
		return nil, rt.differs(fmt.Sprintf("tool call %s: recorded %s %s, replayed %s %s", call.CallID, rc.name, compact(rc.input), name, compact(input)))
	case rc.errMsg != "":
		return nil, errors.New(rc.errMsg)
	}
	return rc.output, nil
}

// toolFacts are a stream's tool calls and their outcomes, in order, as
// compared.
func toolFacts(cs []chunk.Chunk) []string {
	var out []string
	for _, c := range cs {
		switch c.Type {
		case chunk.ToolInput:
			out = append(out, fmt.Sprintf("call %s %s %s", c.ToolCallID, c.ToolName, compact(c.Input)))
		case chunk.ToolOutput:
			out = append(out, fmt.Sprintf("output of %s", c.ToolCallID))
		case chunk.ToolOutputError:
			out = append(out, fmt.Sprintf("error of %s (%s)", c.ToolCallID, c.ErrorText))
		case chunk.ToolInputError:
			out = append(out, fmt.Sprintf("input error of %s", c.ToolCallID))
		case chunk.ToolApprovalRequest:
			out = append(out, fmt.Sprintf("approval request of %s", c.ToolCallID))
		case chunk.ToolOutputDenied:
			out = append(out, fmt.Sprintf("denial of %s", c.ToolCallID))
		}
	}
	return out
}

// diffToolCalls compares the tool calls and their outcomes in two streams.
func diffToolCalls(recorded, replayed []chunk.Chunk) string {
	want, got := toolFacts(recorded), toolFacts(replayed)
	for i := range max(len(want), len(got)) {
		w, g := "nothing", "nothing"
		if i < len(want) {
			w = want[i]
		}
		if i < len(got) {
			g = got[i]
		}
		if w != g {
			return fmt.Sprintf("tool event %d: recorded %s, replayed %s", i+1, w, g)
		}
	}
	return ""
}

// diffEvents compares the turn's comparable events.
func diffEvents(recorded, replayed []eventlog.Event) string {
	for i := range max(len(recorded), len(replayed)) {
		w, g := "nothing", "nothing"
		if i < len(recorded) {
			w = describe(recorded[i])
		}
		if i < len(replayed) {
			g = describe(replayed[i])
		}
		if w != g {
			w, g = around(w, g)
			return fmt.Sprintf("event %d: recorded %s, replayed %s", i+1, w, g)
		}
	}
	return ""
}

// describe is what is compared of an event: its type and, for messages and
// outcomes, what they say (not their ids or times).
func describe(e eventlog.Event) string {
	var v struct {
		Role         string          `json:"role"`
		Parts        json.RawMessage `json:"parts"`
		FinishReason string          `json:"finishReason"`
		Reason       string          `json:"reason"`
		Input        int64           `json:"input"`
		Output       int64           `json:"output"`
	}
	_ = json.Unmarshal(e.Data, &v)
	switch e.Type {
	case chat.EventMessageAppended, "message.updated":
		return fmt.Sprintf("%s %s %s", e.Type, v.Role, compact(v.Parts))
	case "turn.completed":
		return e.Type + " " + v.FinishReason
	case "turn.interrupted":
		return e.Type + " " + v.Reason
	case chat.EventUsageRecorded:
		return fmt.Sprintf("%s %d/%d", e.Type, v.Input, v.Output)
	}
	return e.Type
}

// compact is raw JSON without insignificant space.
func compact(raw json.RawMessage) string {
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return string(raw)
	}
	return b.String()
}

// sameJSON reports whether a and b hold the same JSON value.
func sameJSON(a, b json.RawMessage) bool {
	var va, vb any
	if json.Unmarshal(a, &va) != nil || json.Unmarshal(b, &vb) != nil {
		return bytes.Equal(a, b)
	}
	return reflect.DeepEqual(va, vb)
}

// around shortens two different descriptions for a one-line report: the
// start (the event type) and what surrounds the first differing byte.
func around(a, b string) (string, string) {
	const head, before, after = 40, 60, 100
	i := 0
	for i < len(a) && i < len(b) && a[i] == b[i] {
		i++
	}
	cut := func(s string) string {
		if len(s) <= head+before+after {
			return s
		}
		from, to := max(i-before, head), min(i+after, len(s))
		out := s[:head]
		if from > head {
			out += "..."
		}
		out += s[min(from, len(s)):to]
		if to < len(s) {
			out += "..."
		}
		return strings.ToValidUTF8(out, "")
	}
	return cut(a), cut(b)
}
