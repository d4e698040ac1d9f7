package replay_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/forever-agents/forever/chat"
	"github.com/forever-agents/forever/chat/chunk"
	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/eventlog/eventlogtest"
	"github.com/forever-agents/forever/internal/apierror"
	"github.com/forever-agents/forever/internal/waitfor"
	"github.com/forever-agents/forever/replay"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/prometheus/client_golang/prometheus"
)

// runBatcher runs a Batcher until the test ends (or stop is called).
func runBatcher(t testing.TB, lg *eventlog.Log) (*eventlog.Batcher, func()) {
	b := lg.NewBatcher(eventlog.BatcherConfig{MaxDelay: time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()
	var once sync.Once
	stop := func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return b, stop
}

// fakeTurn is a turn started by fakeChats: the test writes its chunks.
type fakeTurn struct {
	replay.Turn
	Agent string
	Body  json.RawMessage
	w     *chunk.Writer
}

// statusErr is an error with an HTTP status, as the lead's Chats returns.
type statusErr struct {
	code int
	msg  string
}

func (e statusErr) Error() string   { return e.msg }
func (e statusErr) StatusCode() int { return e.code }

// fakeChats implements replay.Chats on a real log: Send starts a turn whose
// chunks the test writes through a real Batcher with chunk.Writer.
type fakeChats struct {
	lg         *eventlog.Log
	b          *eventlog.Batcher
	maxPayload int64
	started    chan *fakeTurn
	stops      atomic.Int32
	next       atomic.Int32

	mu    sync.Mutex
	turns map[string]*fakeTurn // current turn per agent
}

func (f *fakeChats) Send(ctx context.Context, agent string, body json.RawMessage) (replay.Turn, error) {
	switch agent {
	case "busy":
		return replay.Turn{}, apierror.New(apierror.Conflict, "a turn is already running in chat %q: wait for it to end, or stop it", agent)
	case "legacy":
		// An internal error with a code but a message not meant for
		// clients: the gateway keeps the code, not the message.
		return replay.Turn{}, fmt.Errorf("agentd: %w", statusErr{http.StatusConflict, "chat: a turn is already active"})
	case "broken":
		return replay.Turn{}, errors.New("eventlog: append: pebble: closed")
	}
	n := f.next.Add(1)
	// The turn's cursor is the stream's real start, as agentd's chat
	// reply gives it: the agent's last chunk when the turn was accepted,
	// so every chunk of the new stream is after it.
	start, err := f.lg.LastSeq(ctx, eventlog.Filter{Agent: agent, Chunks: true})
	if err != nil {
		return replay.Turn{}, err
	}
	ft := &fakeTurn{
		Turn:  replay.Turn{RequestID: fmt.Sprintf("r%d", n), StreamID: fmt.Sprintf("s%d", n), MessageID: fmt.Sprintf("m%d", n), After: replay.CursorAt(start)},
		Agent: agent, Body: body,
	}
	ft.w = chunk.NewWriter(f.b, agent, ft.StreamID, 0, f.maxPayload)
	f.mu.Lock()
	f.turns[agent] = ft
	f.mu.Unlock()
	select {
	case f.started <- ft:
	default:
	}
	return ft.Turn, nil
}

func (f *fakeChats) Stop(ctx context.Context, agent string) (bool, error) {
	f.stops.Add(1)
	return true, nil
}

func (f *fakeChats) Messages(ctx context.Context, agent string, _ replay.MessagesQuery) (any, error) {
	if agent == "missing" {
		return nil, apierror.New(apierror.NotFound, "no chat %q", agent).WithCause(chat.ErrNotFound)
	}
	return []map[string]any{{"id": "u1", "role": "user", "parts": []map[string]string{{"type": "text", "text": "hi"}}}}, nil
}

// env is a gateway over a real server, log, batcher and streams projection.
type env struct {
	s        *server.Server
	lg       *eventlog.Log
	pr       *eventlog.Projector
	streams  *chunk.Streams
	chats    *fakeChats
	gw       *replay.Gateway
	srv      *httptest.Server
	reg      *prometheus.Registry
	stopping chan struct{}
}

func newEnv(t *testing.T, opts ...func(*replay.GatewayConfig)) *env {
	t.Helper()
	s := eventlogtest.RunServer(t, eventlogtest.ServerOptions{MaxPayload: 64 << 10})
	lg := eventlogtest.OpenOn(t, s, eventlog.Config{})
	pr, err := lg.NewProjector(chunk.StreamsProjection())
	if err != nil {
		t.Fatal(err)
	}
	eventlogtest.RunProjector(t, pr)
	v, err := lg.View(chunk.StreamsProjectionName)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := runBatcher(t, lg)
	e := &env{s: s, lg: lg, pr: pr, streams: chunk.NewStreams(v), reg: prometheus.NewRegistry(), stopping: make(chan struct{})}
	e.chats = &fakeChats{lg: lg, b: b, maxPayload: lg.MaxPayload(), started: make(chan *fakeTurn, 16), turns: map[string]*fakeTurn{}}
	cfg := replay.GatewayConfig{
		Log: lg, Chats: e.chats, Streams: replay.ProjectedIndex{Streams: e.streams}, Stopping: e.stopping, Registerer: e.reg,
	}
	for _, opt := range opts {
		opt(&cfg)
	}
	e.gw, err = replay.NewGateway(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e.srv = httptest.NewServer(e.gw)
	t.Cleanup(e.srv.Close)
	return e
}

// write writes chunks to ft's stream, waits until they are durable and
// projected, and returns the last one's sequence.
func (e *env) write(t *testing.T, ft *fakeTurn, chunks ...chunk.Chunk) eventlog.Seq {
	t.Helper()
	for _, c := range chunks {
		if err := ft.w.Write(t.Context(), c); err != nil {
			t.Fatal(err)
		}
	}
	seq, err := ft.w.Flush(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if err := e.pr.WaitFor(t.Context(), seq); err != nil {
		t.Fatal(err)
	}
	return seq
}

// turn waits for the next turn the fake starts.
func (e *env) turn(t *testing.T) *fakeTurn {
	t.Helper()
	select {
	case ft := <-e.chats.started:
		return ft
	case <-time.After(10 * time.Second):
		t.Fatal("no turn started")
		return nil
	}
}

// gauge returns the value of forever_replay_followers{transport}.
func (e *env) gauge(t *testing.T, transport string) float64 {
	mfs, err := e.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "forever_replay_followers" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "transport" && l.GetValue() == transport {
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	return 0
}

// waitFor polls cond until it holds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	waitfor.True(t, what, cond)
}

// script is a typical turn: start, text, a tool call, finish.
func script(ft *fakeTurn) []chunk.Chunk {
	return []chunk.Chunk{
		{Type: chunk.Start, MessageID: ft.MessageID, RequestID: ft.RequestID},
		{Type: chunk.StartStep},
		{Type: chunk.TextStart, ID: "t1"},
		{Type: chunk.TextDelta, ID: "t1", Delta: "Hello"},
		{Type: chunk.TextDelta, ID: "t1", Delta: ", world"},
		{Type: chunk.TextEnd, ID: "t1"},
		{Type: chunk.ToolInput, ToolCallID: "c1", ToolName: "search", Input: json.RawMessage(`{"q":"x"}`)},
		{Type: chunk.ToolOutput, ToolCallID: "c1", Output: json.RawMessage(`{"hits":1}`)},
		{Type: chunk.FinishStep},
		{Type: chunk.Finish, FinishReason: "stop"},
	}
}
