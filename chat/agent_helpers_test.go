package chat_test

import (
	"context"
	"errors"
	"flag"
	"iter"
	"sync"
	"testing"
	"time"

	"github.com/forever-agents/forever/chat"
	"github.com/forever-agents/forever/chat/chunk"
	"github.com/forever-agents/forever/chat/llm"
	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/eventlog/eventlogtest"
	"github.com/forever-agents/forever/fiber"
	"github.com/nats-io/nats-server/v2/server"
	"go.opentelemetry.io/otel/trace"
)

// env is one process's worth of shared parts: a log with the runs table and
// the chat store projected, and a running chunk batcher.
type env struct {
	srv     *server.Server
	lg      *eventlog.Log
	table   *fiber.Table
	store   *chat.Store
	batcher *eventlog.Batcher

	// writes and chunks, when set, are what the hosts write through
	// instead of lg and batcher (a test's crash or fencing double).
	writes writeLog
	chunks chunk.Batcher
	// tp, when set, traces the hosts' fibers and turns.
	tp trace.TracerProvider
	// version and policy, when set, are the hosts' code version and
	// version policy (fiber.Config).
	version string
	policy  fiber.VersionPolicy
}

// writeLog is what a host writes through: the chat and fiber logs.
type writeLog interface {
	chat.Log
	fiber.Log
}

func newEnv(t *testing.T) *env {
	t.Helper()
	return newEnvWith(t, eventlog.Config{})
}

func newEnvWith(t *testing.T, cfg eventlog.Config) *env {
	t.Helper()
	return newEnvOn(t, eventlogtest.RunServer(t, eventlogtest.ServerOptions{}), cfg)
}

// newEnvOn opens one process's parts on srv: another process than the
// envs already open on it, with Pebble of its own.
func newEnvOn(t *testing.T, srv *server.Server, cfg eventlog.Config) *env {
	t.Helper()
	lg := eventlogtest.OpenOn(t, srv, cfg)
	table, pr, err := fiber.OpenTable(lg)
	if err != nil {
		t.Fatal(err)
	}
	eventlogtest.RunProjector(t, pr)
	store, prs, err := chat.OpenStore(lg)
	if err != nil {
		t.Fatal(err)
	}
	for _, pr := range prs {
		eventlogtest.RunProjector(t, pr)
	}
	return &env{srv: srv, lg: lg, table: table, store: store, batcher: runBatcher(t, lg)}
}

// host is one incarnation of an agent: a fiber Runner and a chat Agent
// wired the way the agentd adapter wires them.
type host struct {
	r *fiber.Runner
	a *chat.Agent

	mu     sync.Mutex
	misuse []string // turn slots released twice or not released (chat.OnSlotMisuse)
}

func (e *env) host(t *testing.T, agent string, p llm.Provider, opt func(*chat.Config)) *host {
	t.Helper()
	h := &host{}
	// Runs after the Runner is closed (cleanups run last first): every
	// turn slot was released once, or kept on purpose.
	t.Cleanup(func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		for _, m := range h.misuse {
			t.Errorf("turn slot misused: %s", m)
		}
	})
	var lg writeLog = e.lg
	var chunks chunk.Batcher = e.batcher
	if e.writes != nil {
		lg = e.writes
	}
	if e.chunks != nil {
		chunks = e.chunks
	}
	r, err := fiber.New(fiber.Config{
		Log: lg, Table: e.table, Agent: agent, BackoffBase: time.Millisecond, TracerProvider: e.tp,
		Version: e.version, VersionPolicy: e.policy,
		VersionPolicyOf: func(name string) fiber.VersionPolicy { return h.a.FiberVersionPolicy(name) },
		Hooks: fiber.Hooks{
			OnVersionFailed: func(ctx context.Context, rec fiber.Recovered, cause error) error {
				_, err := h.a.OnFiberVersionFailed(ctx, rec, cause)
				return err
			},
			OnFiberRecovered: func(ctx context.Context, rec fiber.Recovered) error {
				handled, err := h.a.OnFiberRecovered(ctx, rec)
				if !handled {
					t.Errorf("fiber %q not handled by the chat agent", rec.Name)
				}
				return err
			},
			OnError: func(ctx context.Context, err error) { t.Logf("fiber error: %v", err) },
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	cfg := chat.Config{
		Agent: agent, Log: lg, Store: e.store, Batcher: chunks, MaxPayload: e.lg.MaxPayload(),
		Fibers: r, Provider: p, RetryBackoff: time.Millisecond, TracerProvider: e.tp,
	}
	if *packChunks {
		cfg.ChunkBatchesWritable = func() bool { return true }
	}
	if *endRecords {
		cfg.EndRecordsWritable = func() bool { return true }
	}
	if *announcedSteps {
		cfg.AnnouncedStepsWritable = func() bool { return true }
	}
	if *inlineEnds {
		cfg.InlineEndsWritable = func() bool { return true }
	}
	if opt != nil {
		opt(&cfg)
	}
	a, err := chat.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	chat.OnSlotMisuse(a, func(requestID, what string) {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.misuse = append(h.misuse, requestID+": "+what)
	})
	h.r, h.a = r, a
	return h
}

// packChunks runs the tests' chat agents with packed chunk records
// (Config.ChunkBatchesWritable, record format 7): go test ./chat -args -pack.
var packChunks = flag.Bool("pack", false, "the chat agents pack the chunks they write together into one record (chunk.PackChunks)")

// endRecords runs the tests' chat agents at record format 8, as agentd
// once every node reads it: a completed turn's message and usage ride in
// its turn.completed (Config.EndRecordsWritable). go test ./chat -args
// -end-records=false runs them on the chain of format 7.
var endRecords = flag.Bool("end-records", true, "a completed turn stores its message and usage in its turn.completed (Config.EndRecordsWritable)")

// announcedSteps runs the tests' chat agents at record format 9, as agentd
// once every node reads it: the usage stash before a step's one Idempotent
// tool call carries the call's op.started (Config.AnnouncedStepsWritable).
// go test ./chat -args -announced-steps=false runs them at format 8.
var announcedSteps = flag.Bool("announced-steps", true, "a step's usage stash carries its Idempotent tool call's op.started (Config.AnnouncedStepsWritable)")

// inlineEnds runs the tests' chat agents at record format 11, as agentd
// once every node reads it: a completed turn's turn.completed carries its
// fiber's end (Config.InlineEndsWritable). go test ./chat -args
// -inline-ends=false runs them at format 10.
var inlineEnds = flag.Bool("inline-ends", true, "a completed turn's turn.completed carries its fiber's end (Config.InlineEndsWritable)")

// fake is a scripted provider: each call runs the next script (the last
// one repeats).
type fake struct {
	mu      sync.Mutex
	calls   int
	reqs    []llm.Request
	scripts []func(ctx context.Context, req llm.Request, yield func(llm.Delta, error) bool)
}

func (f *fake) Name() string { return "fake" }

func (f *fake) Stream(ctx context.Context, req llm.Request) iter.Seq2[llm.Delta, error] {
	f.mu.Lock()
	i := min(f.calls, len(f.scripts)-1)
	f.calls++
	f.reqs = append(f.reqs, req)
	f.mu.Unlock()
	return func(yield func(llm.Delta, error) bool) { f.scripts[i](ctx, req, yield) }
}

func (f *fake) Calls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

// cutAfter passes the local model's answer through and, after k text
// deltas, signals reached and blocks until ctx ends (a process that dies
// mid-stream).
func cutAfter(k int, reached chan<- struct{}) func(ctx context.Context, req llm.Request, yield func(llm.Delta, error) bool) {
	local := llm.NewLocal(llm.LocalConfig{Rate: -1})
	return func(ctx context.Context, req llm.Request, yield func(llm.Delta, error) bool) {
		n := 0
		for d, err := range local.Stream(ctx, req) {
			if err != nil {
				yield(d, err)
				return
			}
			if d.Kind == llm.TextDelta {
				if n == k {
					break
				}
				n++
			}
			if !yield(d, nil) {
				return
			}
		}
		if reached != nil {
			reached <- struct{}{}
		}
		<-ctx.Done()
		yield(llm.Delta{}, context.Cause(ctx))
	}
}

// passLocal runs the local model.
func passLocal() func(ctx context.Context, req llm.Request, yield func(llm.Delta, error) bool) {
	local := llm.NewLocal(llm.LocalConfig{Rate: -1})
	return func(ctx context.Context, req llm.Request, yield func(llm.Delta, error) bool) {
		for d, err := range local.Stream(ctx, req) {
			if !yield(d, err) || err != nil {
				return
			}
		}
	}
}

// failWith yields err at once.
func failWith(err error) func(ctx context.Context, req llm.Request, yield func(llm.Delta, error) bool) {
	return func(ctx context.Context, req llm.Request, yield func(llm.Delta, error) bool) {
		yield(llm.Delta{}, err)
	}
}

func wait(t *testing.T, ch <-chan struct{}) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(20 * time.Second):
		t.Fatal("timed out")
	}
}

// streamOf returns the chunks of a stream and the text their deltas build.
func streamOf(t *testing.T, lg *eventlog.Log, agent, stream string) ([]chunk.Chunk, string) {
	t.Helper()
	cs := readChunks(t, lg, agent, stream)
	var text string
	for _, c := range cs {
		if c.Type == chunk.TextDelta {
			text += c.Delta
		}
	}
	return cs, text
}

func count(cs []chunk.Chunk, typ string) int {
	n := 0
	for _, c := range cs {
		if c.Type == typ {
			n++
		}
	}
	return n
}

// settled waits until the store shows the agent's last event, and returns
// the visible messages.
func settled(t *testing.T, e *env, agent string) []chat.Message {
	t.Helper()
	last, err := e.lg.LastSeq(t.Context(), eventlog.Filter{Agent: agent})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.store.WaitFor(t.Context(), last); err != nil {
		t.Fatal(err)
	}
	msgs, _, err := e.store.Messages(agent, chat.Page{})
	if err != nil {
		t.Fatal(err)
	}
	return msgs
}

func lastTurn(t *testing.T, e *env, agent string) chat.TurnInfo {
	t.Helper()
	tr, ok, err := e.store.LastTurn(agent)
	if err != nil || !ok {
		t.Fatalf("last turn: %v %v", ok, err)
	}
	return tr
}

func streamInfo(t *testing.T, e *env, agent, stream string) chunk.StreamInfo {
	t.Helper()
	last, err := e.lg.LastSeq(t.Context(), eventlog.Filter{Agent: agent, Stream: stream})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.store.WaitForChunks(t.Context(), last); err != nil {
		t.Fatal(err)
	}
	info, err := e.store.Streams().Get(agent, stream)
	if err != nil {
		t.Fatal(err)
	}
	return info
}

var errNotCalled = errors.New("provider must not be called")

// runs returns the agent's rows of the runs table, once it shows the
// agent's last event.
func runs(t *testing.T, e *env, agent string) []fiber.Row {
	t.Helper()
	last, err := e.lg.LastSeq(t.Context(), eventlog.Filter{Agent: agent})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.table.WaitFor(t.Context(), last); err != nil {
		t.Fatal(err)
	}
	rows, err := e.table.Rows(agent)
	if err != nil {
		t.Fatal(err)
	}
	return rows
}
