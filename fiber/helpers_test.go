package fiber_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/eventlog/eventlogtest"
	"github.com/forever-agents/forever/fiber"
	"github.com/nats-io/nats-server/v2/server"
)

const agent = "a1"

// env is one "process": a Log with its own Pebble dir and a running runs
// projection, on a shared NATS server.
type env struct {
	srv   *server.Server
	lg    *eventlog.Log
	table *fiber.Table
	pr    *eventlog.Projector
}

func newEnv(t *testing.T) *env {
	t.Helper()
	srv := eventlogtest.RunServer(t, eventlogtest.ServerOptions{})
	return openEnv(t, srv, nil)
}

// openEnv opens a Log on srv with a fresh Pebble dir and runs the runs
// projection on it. wrap, when set, wraps the View the Table reads.
func openEnv(t *testing.T, srv *server.Server, wrap func(fiber.View) fiber.View) *env {
	t.Helper()
	return openEnvWith(t, srv, eventlog.Config{}, wrap)
}

// openEnvWith is openEnv with a Log config (an Owner, to fence it).
func openEnvWith(t *testing.T, srv *server.Server, cfg eventlog.Config, wrap func(fiber.View) fiber.View) *env {
	t.Helper()
	lg := eventlogtest.OpenOn(t, srv, cfg)
	pr, err := lg.NewProjector(fiber.RunsProjection())
	if err != nil {
		t.Fatal(err)
	}
	var v fiber.View
	v, err = lg.View(fiber.RunsName)
	if err != nil {
		t.Fatal(err)
	}
	if wrap != nil {
		v = wrap(v)
	}
	eventlogtest.RunProjector(t, pr)
	return &env{srv: srv, lg: lg, table: fiber.NewTable(v, pr), pr: pr}
}

// restart simulates a new process: a new Log with a fresh Pebble dir over
// the same JetStream data.
func (e *env) restart(t *testing.T) *env { return openEnv(t, e.srv, nil) }

// runner builds a Runner for agent with fast backoff, closed at cleanup.
func (e *env) runner(t *testing.T, cfg fiber.Config) *fiber.Runner {
	t.Helper()
	cfg.Log, cfg.Table = e.lg, e.table
	if cfg.Agent == "" {
		cfg.Agent = agent
	}
	if cfg.BackoffBase == 0 {
		cfg.BackoffBase, cfg.BackoffMax = time.Millisecond, 4*time.Millisecond
	}
	r, err := fiber.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// eventTypes is the types of the agent's events, space-separated.
func (e *env) eventTypes(t *testing.T) string {
	t.Helper()
	var types []string
	for _, ev := range e.events(t) {
		types = append(types, ev.Type)
	}
	return strings.Join(types, " ")
}

// events returns the agent's events of the given types (all when none).
func (e *env) events(t *testing.T, types ...string) []eventlog.Event {
	t.Helper()
	all, err := e.lg.Read(t.Context(), eventlog.Filter{Agent: agent}, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(types) == 0 {
		return all
	}
	var out []eventlog.Event
	for _, ev := range all {
		for _, typ := range types {
			if ev.Type == typ {
				out = append(out, ev)
			}
		}
	}
	return out
}

// sync waits until the table has applied everything in the log.
func (e *env) sync(t *testing.T) {
	t.Helper()
	last, err := e.lg.LastSeq(t.Context(), eventlog.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.table.WaitFor(t.Context(), last); err != nil {
		t.Fatal(err)
	}
}

func (e *env) rows(t *testing.T) []fiber.Row {
	t.Helper()
	e.sync(t)
	rows, err := e.table.Rows(agent)
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

// appendRaw appends an event as another (crashed) process would have.
func (e *env) appendRaw(t *testing.T, typ string, data any) {
	t.Helper()
	ev, err := eventlog.NewEvent(agent, typ, data)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.lg.Append(t.Context(), ev); err != nil {
		t.Fatal(err)
	}
}

func decodeData(t *testing.T, ev eventlog.Event) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(ev.Data, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// keepAlive is a fake fiber.KeepAlive counting references.
type keepAlive struct {
	mu             sync.Mutex
	held, acquired int
}

func (k *keepAlive) Acquire() func() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.held++
	k.acquired++
	var once sync.Once
	return func() {
		once.Do(func() {
			k.mu.Lock()
			k.held--
			k.mu.Unlock()
		})
	}
}

func (k *keepAlive) counts() (held, acquired int) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.held, k.acquired
}

// errSink collects errors delivered to Hooks.OnError.
type errSink struct {
	mu   sync.Mutex
	errs []error
	ch   chan error
}

func newErrSink() *errSink { return &errSink{ch: make(chan error, 100)} }

func (s *errSink) OnError(_ context.Context, err error) {
	s.mu.Lock()
	s.errs = append(s.errs, err)
	s.mu.Unlock()
	s.ch <- err
}

func (s *errSink) next(t *testing.T) error {
	t.Helper()
	select {
	case err := <-s.ch:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("no error reported")
		return nil
	}
}

func (s *errSink) all() []error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]error(nil), s.errs...)
}

var errBoom = errors.New("boom")
