package keepalive_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/eventlog/eventlogtest"
	"github.com/forever-agents/forever/internal/waitfor"
	"github.com/forever-agents/forever/keepalive"
	"github.com/forever-agents/forever/keepalive/keepalivetest"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/prometheus/client_golang/prometheus"
)

// harness runs a Scheduler on a real embedded NATS server and Pebble, with a
// fake clock. start and stop may be called repeatedly (restarts).
type harness struct {
	t   *testing.T
	srv *server.Server
	dir string
	clk *keepalivetest.Clock
	reg *prometheus.Registry

	fires   chan keepalive.Schedule
	errs    chan error // OnError
	mu      sync.Mutex
	fireErr error                            // returned by Fire
	block   func(ctx context.Context, n int) // when set, Fire calls it before returning (n counts calls from 1)
	calls   int                              // Fire calls

	lg     *eventlog.Log
	s      *keepalive.Scheduler
	cancel context.CancelFunc
	done   chan error
}

func newHarness(t *testing.T) *harness {
	h := &harness{
		t:     t,
		srv:   eventlogtest.RunServer(t, eventlogtest.ServerOptions{}),
		dir:   t.TempDir(),
		clk:   keepalivetest.NewClock(t0),
		reg:   prometheus.NewRegistry(),
		fires: make(chan keepalive.Schedule, 100),
		errs:  make(chan error, 100),
	}
	return h
}

// setBlock makes Fire call block (with its ctx and the call number) before
// returning.
func (h *harness) setBlock(block func(ctx context.Context, n int)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.block = block
}

func (h *harness) setFireErr(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.fireErr = err
}

// start opens a Log on the harness's server and Pebble dir, and runs a
// Scheduler on it until ready.
func (h *harness) start(cfg keepalive.SchedulerConfig) {
	t := h.t
	t.Helper()
	h.lg = eventlogtest.OpenOn(t, h.srv, eventlog.Config{Dir: h.dir})
	t.Cleanup(h.stop) // before the Log's cleanup closes Pebble
	cfg.Log, cfg.Clock, cfg.Registerer = h.lg, h.clk, h.reg
	cfg.Fire = func(ctx context.Context, sc keepalive.Schedule) error {
		h.fires <- sc
		h.mu.Lock()
		h.calls++
		block, n, err := h.block, h.calls, h.fireErr
		h.mu.Unlock()
		if block != nil {
			block(ctx, n)
		}
		return err
	}
	cfg.OnError = func(_ keepalive.Schedule, err error) { h.errs <- err }
	s, err := keepalive.NewScheduler(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	h.s, h.cancel, h.done = s, cancel, make(chan error, 1)
	go func() { h.done <- s.Run(ctx) }()
	select {
	case <-s.Ready():
	case err := <-h.done:
		t.Fatalf("Run: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("scheduler not ready")
	}
}

// stop stops Run, waits for it, and closes the Log.
func (h *harness) stop() {
	if h.cancel == nil {
		return
	}
	h.cancel()
	if err := <-h.done; err != nil {
		h.t.Errorf("Run: %v", err)
	}
	h.lg.Close()
	h.cancel = nil
}

func (h *harness) schedule(agent string, spec keepalive.Spec) keepalive.Schedule {
	h.t.Helper()
	sc, err := h.s.Schedule(h.t.Context(), agent, spec)
	if err != nil {
		h.t.Fatalf("Schedule(%s, %+v): %v", agent, spec, err)
	}
	return sc
}

func (h *harness) list(agent string) []keepalive.Schedule {
	h.t.Helper()
	l, err := h.s.List(agent)
	if err != nil {
		h.t.Fatalf("List(%s): %v", agent, err)
	}
	return l
}

// waitEvent waits for the n-th event of type typ on agent's subject and for
// the schedules view to have applied it.
func (h *harness) waitEvent(agent, typ string, n int) eventlog.Event {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(h.t.Context(), 10*time.Second)
	defer cancel()
	seen := 0
	for e, err := range h.lg.Follow(ctx, eventlog.Filter{Agent: agent}, 0) {
		if err != nil {
			h.t.Fatalf("waiting for %s #%d of %s: %v", typ, n, agent, err)
		}
		if e.Type == typ {
			if seen++; seen == n {
				if err := h.s.Projector().WaitFor(ctx, e.Seq); err != nil {
					h.t.Fatal(err)
				}
				return e
			}
		}
	}
	h.t.Fatal("unreachable")
	return eventlog.Event{}
}

// noFire checks that nothing fired: the loop has been given time to act on a
// change it was woken for, as it runs before the next view change.
func (h *harness) noFire() {
	h.t.Helper()
	select {
	case sc := <-h.fires:
		h.t.Fatalf("unexpected fire of %s %s", sc.Agent, sc.ID)
	default:
	}
}

func TestScheduleKinds(t *testing.T) {
	h := newHarness(t)
	h.start(keepalive.SchedulerConfig{})
	payload := json.RawMessage(`{ "n": 1 }`)

	delay := h.schedule("a1", keepalive.Spec{Callback: "remind", Payload: payload, Delay: time.Minute})
	if got, want := delay.Kind, keepalive.KindDelay; got != want {
		t.Fatalf("Kind = %s, want %s", got, want)
	}
	if got, want := delay.NextAt, t0.Add(time.Minute); !got.Equal(want) {
		t.Fatalf("NextAt = %v, want %v", got, want)
	}
	if got, want := string(delay.Payload), `{"n":1}`; got != want {
		t.Fatalf("Payload = %s, want %s", got, want)
	}
	at := h.schedule("a1", keepalive.Spec{Callback: "wake", At: t0.Add(2 * time.Minute)})
	if l := h.list("a1"); len(l) != 2 || l[0].ID != delay.ID || l[1].ID != at.ID {
		t.Fatalf("List = %+v, want [delay, at]", l)
	}

	h.clk.Advance(time.Minute)
	if got := recv(t, h.fires, "delay fire"); got.ID != delay.ID || got.Callback != "remind" || string(got.Payload) != `{"n":1}` {
		t.Fatalf("fired %+v, want the delay schedule", got)
	}
	fired := h.waitEvent("a1", keepalive.EventFired, 1)
	var d keepalive.OutcomeData
	if err := fired.Decode(&d); err != nil {
		t.Fatal(err)
	}
	if d.ID != delay.ID || !d.NextAt.IsZero() || d.Attempts != 1 {
		t.Fatalf("fired data = %+v, want id %s, no next, 1 attempt", d, delay.ID)
	}
	if l := h.list("a1"); len(l) != 1 || l[0].ID != at.ID {
		t.Fatalf("List after the delay fired = %+v, want [at]", l)
	}
	h.noFire()

	h.clk.Advance(time.Minute)
	if got := recv(t, h.fires, "at fire"); got.ID != at.ID {
		t.Fatalf("fired %s, want %s", got.ID, at.ID)
	}
	h.waitEvent("a1", keepalive.EventFired, 2)
	if l := h.list("a1"); len(l) != 0 {
		t.Fatalf("List after both fired = %+v, want empty", l)
	}
	// The counter moves just after the fired event is appended.
	var got float64
	waitfor.True(t, "two schedules counted as fired", func() bool {
		got = metricValue(t, h.reg, "forever_keepalive_schedules_fired_total", "ok")
		return got == 2
	})
	if got != 2 {
		t.Fatalf("fired_total{ok} = %v, want 2", got)
	}
}

func TestScheduleDelayZeroFiresAtOnce(t *testing.T) {
	h := newHarness(t)
	h.start(keepalive.SchedulerConfig{})
	sc := h.schedule("a1", keepalive.Spec{Kind: keepalive.KindDelay, Callback: "now"})
	if got := recv(t, h.fires, "fire"); got.ID != sc.ID {
		t.Fatalf("fired %s, want %s", got.ID, sc.ID)
	}
}

func TestScheduleEvery(t *testing.T) {
	h := newHarness(t)
	h.start(keepalive.SchedulerConfig{})
	sc := h.schedule("a1", keepalive.Spec{Callback: "tick", Every: time.Minute})
	for i := 1; i <= 3; i++ {
		h.clk.Advance(time.Minute)
		if got := recv(t, h.fires, "every fire"); got.ID != sc.ID || !got.NextAt.Equal(t0.Add(time.Duration(i)*time.Minute)) {
			t.Fatalf("fire %d: %s due %v, want %s due %v", i, got.ID, got.NextAt, sc.ID, t0.Add(time.Duration(i)*time.Minute))
		}
		h.waitEvent("a1", keepalive.EventFired, i)
		l := h.list("a1")
		if len(l) != 1 || !l[0].NextAt.Equal(t0.Add(time.Duration(i+1)*time.Minute)) {
			t.Fatalf("after fire %d: List = %+v, want next at +%dm", i, l, i+1)
		}
	}
	// Downtime of 10 intervals: one fire, then back on the grid.
	h.clk.Advance(10 * time.Minute)
	recv(t, h.fires, "catch-up fire")
	h.waitEvent("a1", keepalive.EventFired, 4)
	if l := h.list("a1"); !l[0].NextAt.Equal(t0.Add(14 * time.Minute)) {
		t.Fatalf("after catch-up: next %v, want %v", l[0].NextAt, t0.Add(14*time.Minute))
	}
	h.noFire()
}

func TestScheduleCron(t *testing.T) {
	h := newHarness(t)
	h.start(keepalive.SchedulerConfig{})
	tests := []struct {
		name, expr string
		next       time.Time
	}{
		{"five fields", "*/5 * * * *", time.Date(2025, 1, 1, 0, 5, 0, 0, time.UTC)},
		{"seconds", "30 * * * * *", time.Date(2025, 1, 1, 0, 1, 30, 0, time.UTC)},
		{"descriptor", "@hourly", time.Date(2025, 1, 1, 1, 0, 0, 0, time.UTC)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sc := h.schedule("c-"+tt.name[:4], keepalive.Spec{Callback: "cron", Cron: tt.expr})
			if !sc.NextAt.Equal(tt.next) {
				t.Fatalf("NextAt = %v, want %v", sc.NextAt, tt.next)
			}
		})
	}
	// Fire the five-field one and check the next occurrence.
	h.clk.Set(time.Date(2025, 1, 1, 0, 5, 0, 0, time.UTC))
	seen := map[string]bool{}
	for range 2 { // the seconds one (00:01:30) and the five-field one (00:05)
		seen[recv(t, h.fires, "cron fire").Cron] = true
	}
	if !seen["*/5 * * * *"] || !seen["30 * * * * *"] {
		t.Fatalf("fired %v, want the five-field and seconds schedules", seen)
	}
	h.waitEvent("c-five", keepalive.EventFired, 1)
	if l := h.list("c-five"); len(l) != 1 || !l[0].NextAt.Equal(time.Date(2025, 1, 1, 0, 10, 0, 0, time.UTC)) {
		t.Fatalf("List = %+v, want next at 00:10", l)
	}
	h.waitEvent("c-seco", keepalive.EventFired, 1)
	if l := h.list("c-seco"); len(l) != 1 || !l[0].NextAt.Equal(time.Date(2025, 1, 1, 0, 5, 30, 0, time.UTC)) {
		t.Fatalf("List = %+v, want next at 00:05:30", l)
	}
}

func TestScheduleInvalid(t *testing.T) {
	h := newHarness(t)
	h.start(keepalive.SchedulerConfig{})
	tests := []struct {
		name  string
		agent string
		spec  keepalive.Spec
	}{
		{"no callback", "a1", keepalive.Spec{Delay: time.Second}},
		{"no kind", "a1", keepalive.Spec{Callback: "x"}},
		{"two kinds", "a1", keepalive.Spec{Callback: "x", Delay: time.Second, Every: time.Second}},
		{"kind mismatch", "a1", keepalive.Spec{Callback: "x", Kind: keepalive.KindAt, Every: time.Second}},
		{"negative delay", "a1", keepalive.Spec{Callback: "x", Delay: -time.Second}},
		{"negative every", "a1", keepalive.Spec{Callback: "x", Every: -time.Second}},
		{"bad cron", "a1", keepalive.Spec{Callback: "x", Cron: "every tuesday"}},
		{"bad payload", "a1", keepalive.Spec{Callback: "x", Delay: time.Second, Payload: json.RawMessage("{")}},
		{"bad agent", "a.b", keepalive.Spec{Callback: "x", Delay: time.Second}},
		{"bad id", "a1", keepalive.Spec{ID: "x y", Callback: "x", Delay: time.Second}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := h.s.Schedule(t.Context(), tt.agent, tt.spec); !errors.Is(err, keepalive.ErrInvalid) {
				t.Fatalf("Schedule = %v, want ErrInvalid", err)
			}
		})
	}
}

func TestScheduleRecurringDedupe(t *testing.T) {
	h := newHarness(t)
	h.start(keepalive.SchedulerConfig{})
	p := json.RawMessage(`{"feed": "x"}`)
	every := h.schedule("a1", keepalive.Spec{Callback: "poll", Payload: p, Every: time.Minute})
	cron := h.schedule("a1", keepalive.Spec{Callback: "poll", Payload: p, Cron: "0 * * * *"})
	tests := []struct {
		name   string
		agent  string
		spec   keepalive.Spec
		sameAs string // ID expected, "" for a new schedule
	}{
		{"every again", "a1", keepalive.Spec{Callback: "poll", Payload: json.RawMessage(`{"feed":"x"}`), Every: time.Minute}, every.ID},
		{"cron again", "a1", keepalive.Spec{Callback: "poll", Payload: p, Cron: "0 * * * *"}, cron.ID},
		{"other payload", "a1", keepalive.Spec{Callback: "poll", Payload: json.RawMessage(`{"feed":"y"}`), Every: time.Minute}, ""},
		{"other callback", "a1", keepalive.Spec{Callback: "poll2", Payload: p, Every: time.Minute}, ""},
		{"other interval", "a1", keepalive.Spec{Callback: "poll", Payload: p, Every: time.Hour}, ""},
		{"other agent", "a2", keepalive.Spec{Callback: "poll", Payload: p, Every: time.Minute}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := h.schedule(tt.agent, tt.spec)
			if tt.sameAs != "" && got.ID != tt.sameAs {
				t.Fatalf("ID = %s, want the existing %s", got.ID, tt.sameAs)
			}
			if tt.sameAs == "" && (got.ID == every.ID || got.ID == cron.ID) {
				t.Fatalf("got the existing schedule %s, want a new one", got.ID)
			}
		})
	}
	if got, want := len(h.list("a1")), 5; got != want {
		t.Fatalf("a1 has %d schedules, want %d", got, want)
	}
	// One-shot schedules are not deduplicated.
	a := h.schedule("a3", keepalive.Spec{Callback: "once", Delay: time.Hour})
	b := h.schedule("a3", keepalive.Spec{Callback: "once", Delay: time.Hour})
	if a.ID == b.ID {
		t.Fatal("two delay schedules got one id")
	}
}

func TestCancelAndList(t *testing.T) {
	h := newHarness(t)
	h.start(keepalive.SchedulerConfig{})
	// "a1/x" extends "a1" as a string: List must keep them apart.
	a := h.schedule("a1", keepalive.Spec{Callback: "late", Delay: 2 * time.Hour})
	b := h.schedule("a1", keepalive.Spec{Callback: "early", Delay: time.Hour})
	c := h.schedule("a1/x", keepalive.Spec{Callback: "other", Delay: time.Hour})
	named := h.schedule("a1", keepalive.Spec{ID: "daily-report", Callback: "report", Cron: "@daily"})
	if named.ID != "daily-report" {
		t.Fatalf("ID = %s, want daily-report", named.ID)
	}
	l := h.list("a1")
	if len(l) != 3 || l[0].ID != b.ID || l[1].ID != a.ID || l[2].ID != named.ID {
		t.Fatalf("List(a1) = %+v, want [early, late, daily-report] by NextAt", l)
	}
	if l := h.list("a1/x"); len(l) != 1 || l[0].ID != c.ID || l[0].Agent != "a1/x" {
		t.Fatalf("List(a1/x) = %+v", l)
	}
	if l := h.list("nobody"); len(l) != 0 {
		t.Fatalf("List(nobody) = %+v", l)
	}

	for i, want := range []bool{true, false} {
		existed, err := h.s.Cancel(t.Context(), "a1", b.ID)
		if err != nil || existed != want {
			t.Fatalf("Cancel #%d = %v, %v; want %v", i+1, existed, err, want)
		}
	}
	h.waitEvent("a1", keepalive.EventCancelled, 1)
	if l := h.list("a1"); len(l) != 2 || l[0].ID != a.ID {
		t.Fatalf("List after cancel = %+v", l)
	}
	if existed, err := h.s.Cancel(t.Context(), "a1", "no-such"); err != nil || existed {
		t.Fatalf("Cancel(no-such) = %v, %v", existed, err)
	}
	// A cancelled schedule does not fire.
	h.clk.Advance(90 * time.Minute)
	if got := recv(t, h.fires, "fire"); got.ID != c.ID {
		t.Fatalf("fired %s (%s), want only %s", got.ID, got.Callback, c.ID)
	}
	h.waitEvent("a1/x", keepalive.EventFired, 1)
	h.noFire()
}

func TestOverdueFiresAfterRestart(t *testing.T) {
	h := newHarness(t)
	h.start(keepalive.SchedulerConfig{})
	once := h.schedule("a1", keepalive.Spec{Callback: "remind", Delay: time.Minute})
	every := h.schedule("a2", keepalive.Spec{Callback: "tick", Every: time.Minute})
	h.stop()

	h.clk.Advance(time.Hour) // down for an hour
	h.start(keepalive.SchedulerConfig{})
	got := map[string]bool{}
	for range 2 {
		got[recv(t, h.fires, "overdue fire").ID] = true
	}
	if !got[once.ID] || !got[every.ID] {
		t.Fatalf("fired %v, want %s and %s", got, once.ID, every.ID)
	}
	h.waitEvent("a1", keepalive.EventFired, 1)
	h.waitEvent("a2", keepalive.EventFired, 1)
	if l := h.list("a1"); len(l) != 0 {
		t.Fatalf("one-shot still listed: %+v", l)
	}
	if l := h.list("a2"); len(l) != 1 || !l[0].NextAt.Equal(t0.Add(61*time.Minute)) {
		t.Fatalf("every after catch-up = %+v, want next at +61m", l)
	}
	h.noFire()
}

func TestFailingCallbackRetriesThenFails(t *testing.T) {
	h := newHarness(t)
	h.start(keepalive.SchedulerConfig{MaxAttempts: 3, BackoffBase: time.Second, BackoffMax: time.Minute})
	errCallback := errors.New("agent unavailable")
	h.setFireErr(errCallback)
	sc := h.schedule("a1", keepalive.Spec{Callback: "remind", Delay: time.Second})

	h.clk.Advance(time.Second)
	wait := time.Second
	for attempt := 1; attempt <= 3; attempt++ {
		got := recv(t, h.fires, "attempt")
		if got.Attempts != attempt-1 {
			t.Fatalf("attempt %d: schedule has Attempts %d, want %d", attempt, got.Attempts, attempt-1)
		}
		err := recv(t, h.errs, "OnError")
		var fe *keepalive.FireError
		if !errors.As(err, &fe) || fe.Attempts != attempt || !errors.Is(err, errCallback) {
			t.Fatalf("OnError(%v), want a FireError of attempt %d wrapping the callback error", err, attempt)
		}
		if final := errors.Is(err, keepalive.ErrExhausted); final != (attempt == 3) {
			t.Fatalf("attempt %d: ErrExhausted = %v", attempt, final)
		}
		if attempt == 3 {
			break
		}
		ev := h.waitEvent("a1", keepalive.EventRetrying, attempt)
		var d keepalive.OutcomeData
		if err := ev.Decode(&d); err != nil {
			t.Fatal(err)
		}
		if d.Attempts != attempt || d.Error != errCallback.Error() {
			t.Fatalf("retrying data = %+v, want attempt %d with the error", d, attempt)
		}
		l := h.list("a1")
		if len(l) != 1 || l[0].Attempts != attempt || !l[0].NextAt.Equal(h.clk.Now().Add(wait)) {
			t.Fatalf("List = %+v, want attempts %d, retry in %s", l, attempt, wait)
		}
		h.clk.Advance(wait)
		wait *= 2
	}
	ev := h.waitEvent("a1", keepalive.EventFailed, 1)
	var d keepalive.OutcomeData
	if err := ev.Decode(&d); err != nil {
		t.Fatal(err)
	}
	if d.ID != sc.ID || d.Attempts != 3 || d.Error == "" || !d.NextAt.IsZero() {
		t.Fatalf("failed data = %+v", d)
	}
	if l := h.list("a1"); len(l) != 0 {
		t.Fatalf("failed one-shot still listed: %+v", l)
	}
	for outcome, want := range map[string]float64{"retry": 2, "failed": 1, "ok": 0} {
		if got := metricValue(t, h.reg, "forever_keepalive_schedules_fired_total", outcome); got != want {
			t.Errorf("fired_total{%s} = %v, want %v", outcome, got, want)
		}
	}
}

func TestAttemptsSurviveRestart(t *testing.T) {
	h := newHarness(t)
	cfg := keepalive.SchedulerConfig{MaxAttempts: 2, BackoffBase: time.Minute}
	h.start(cfg)
	h.setFireErr(errors.New("down"))
	h.schedule("a1", keepalive.Spec{Callback: "remind", Kind: keepalive.KindDelay})
	recv(t, h.fires, "attempt 1")
	h.waitEvent("a1", keepalive.EventRetrying, 1)
	h.stop()

	h.clk.Advance(time.Minute)
	h.start(cfg)
	if got := recv(t, h.fires, "attempt 2"); got.Attempts != 1 {
		t.Fatalf("after restart Attempts = %d, want 1", got.Attempts)
	}
	h.waitEvent("a1", keepalive.EventFailed, 1)
	if l := h.list("a1"); len(l) != 0 {
		t.Fatalf("List = %+v, want empty", l)
	}
}

func TestRecurringGivenUpContinues(t *testing.T) {
	h := newHarness(t)
	h.start(keepalive.SchedulerConfig{MaxAttempts: 1})
	h.setFireErr(errors.New("down"))
	h.schedule("a1", keepalive.Spec{Callback: "tick", Every: time.Minute})
	h.clk.Advance(time.Minute)
	recv(t, h.fires, "fire")
	h.waitEvent("a1", keepalive.EventFailed, 1)
	l := h.list("a1")
	if len(l) != 1 || !l[0].NextAt.Equal(t0.Add(2*time.Minute)) || l[0].Attempts != 0 || l[0].LastError != "down" {
		t.Fatalf("List = %+v, want next at +2m, attempts reset, last error kept", l)
	}
	h.setFireErr(nil)
	h.clk.Advance(time.Minute)
	recv(t, h.fires, "fire")
	h.waitEvent("a1", keepalive.EventFired, 1)
	if l := h.list("a1"); l[0].LastError != "" {
		t.Fatalf("LastError after success = %q", l[0].LastError)
	}
}

// rows returns every row of the schedules view.
func rows(t *testing.T, lg *eventlog.Log) map[string]string {
	t.Helper()
	v, err := lg.View(keepalive.ProjectionName)
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

func TestProjectionDeterministic(t *testing.T) {
	h := newHarness(t)
	h.start(keepalive.SchedulerConfig{MaxAttempts: 2})
	// A history with every event type.
	h.schedule("a1", keepalive.Spec{Callback: "tick", Every: time.Minute, Payload: json.RawMessage(`{"k":1}`)})
	h.schedule("a1", keepalive.Spec{Callback: "cron", Cron: "*/2 * * * *"})
	gone := h.schedule("a2", keepalive.Spec{Callback: "once", Delay: time.Hour})
	h.schedule("a2", keepalive.Spec{Callback: "later", At: t0.Add(24 * time.Hour)})
	h.schedule("a3", keepalive.Spec{ID: "fixed", Callback: "v1", Delay: time.Hour})
	h.schedule("a3", keepalive.Spec{ID: "fixed", Callback: "v2", Delay: 2 * time.Hour}) // replaces
	if _, err := h.s.Cancel(t.Context(), "a2", gone.ID); err != nil {
		t.Fatal(err)
	}
	h.clk.Advance(time.Minute) // 00:02: tick and cron fire ok
	recv(t, h.fires, "fire")
	recv(t, h.fires, "fire")
	h.waitEvent("a1", keepalive.EventFired, 2)
	h.setFireErr(errors.New("nope"))
	h.clk.Advance(time.Minute) // 00:03: tick fails once
	recv(t, h.fires, "fire")
	h.waitEvent("a1", keepalive.EventRetrying, 1)
	h.clk.Advance(time.Minute) // 00:04: tick gives up (2 attempts), cron fails once
	recv(t, h.fires, "fire")
	recv(t, h.fires, "fire")
	h.waitEvent("a1", keepalive.EventFailed, 1)
	h.waitEvent("a1", keepalive.EventRetrying, 2)

	want := rows(t, h.lg)
	if len(want) != 2*4 {
		t.Fatalf("view has %d rows, want 8 (4 schedules, 2 keys each): %v", len(want), want)
	}
	if l := h.list("a3"); len(l) != 1 || l[0].Callback != "v2" {
		t.Fatalf("replaced schedule = %+v", l)
	}

	t.Run("rebuild", func(t *testing.T) {
		if err := h.s.Projector().Rebuild(t.Context()); err != nil {
			t.Fatal(err)
		}
		// Rebuild replies before the replay resets the in-memory cursor, so
		// WaitFor cannot be trusted here: wait for the rows instead.
		waitfor.NoError(t, func() error {
			if got := rows(t, h.lg); !maps.Equal(got, want) {
				return fmt.Errorf("rows after Rebuild:\n%v\nwant\n%v", got, want)
			}
			return nil
		})
	})

	t.Run("drop pebble", func(t *testing.T) {
		h.stop()
		if err := os.RemoveAll(h.dir); err != nil {
			t.Fatal(err)
		}
		h.start(keepalive.SchedulerConfig{MaxAttempts: 2})
		if got := rows(t, h.lg); !maps.Equal(got, want) {
			t.Fatalf("rows after dropping Pebble:\n%v\nwant\n%v", got, want)
		}
	})
}

func TestSchedulerStopped(t *testing.T) {
	h := newHarness(t)
	h.start(keepalive.SchedulerConfig{})
	s := h.s
	h.stop()
	if _, err := s.Schedule(t.Context(), "a1", keepalive.Spec{Callback: "x", Delay: time.Second}); !errors.Is(err, keepalive.ErrStopped) {
		t.Fatalf("Schedule after Run returned = %v, want ErrStopped", err)
	}
	if err := s.Run(t.Context()); !errors.Is(err, keepalive.ErrStopped) {
		t.Fatalf("second Run = %v, want ErrStopped", err)
	}
}

func TestSchedulerConfigValidate(t *testing.T) {
	lg, _ := eventlogtest.Open(t, eventlog.Config{})
	fire := func(context.Context, keepalive.Schedule) error { return nil }
	tests := []struct {
		name string
		cfg  keepalive.SchedulerConfig
	}{
		{"no log", keepalive.SchedulerConfig{Fire: fire}},
		{"no fire", keepalive.SchedulerConfig{Log: lg}},
		{"negative attempts", keepalive.SchedulerConfig{Log: lg, Fire: fire, MaxAttempts: -1}},
		{"max below base", keepalive.SchedulerConfig{Log: lg, Fire: fire, BackoffBase: time.Minute, BackoffMax: time.Second}},
		{"negative callback timeout", keepalive.SchedulerConfig{Log: lg, Fire: fire, CallbackTimeout: -time.Second}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := keepalive.NewScheduler(tt.cfg); !errors.Is(err, keepalive.ErrInvalid) {
				t.Fatalf("NewScheduler = %v, want ErrInvalid", err)
			}
		})
	}
}

// TestHungCallbackDefaultTimeout: with no CallbackTimeout configured, a
// hung callback is reset after 30 s, as in the Cloudflare design (it was 5
// minutes): at 30 s on the clock its ctx is cancelled and the attempt is
// recorded as hung.
func TestHungCallbackDefaultTimeout(t *testing.T) {
	if keepalive.DefaultCallbackTimeout != 30*time.Second {
		t.Fatalf("DefaultCallbackTimeout = %s, want 30s", keepalive.DefaultCallbackTimeout)
	}
	h := newHarness(t)
	cancelled := make(chan struct{})
	h.setBlock(func(ctx context.Context, n int) {
		if n == 1 {
			<-ctx.Done()
			close(cancelled)
		}
	})
	h.start(keepalive.SchedulerConfig{})
	sc := h.schedule("a1", keepalive.Spec{Callback: "tick", Delay: time.Minute})
	h.clk.Advance(time.Minute)
	if got := recv(t, h.fires, "first fire"); got.ID != sc.ID {
		t.Fatalf("fired %s, want %s", got.ID, sc.ID)
	}
	h.clk.Advance(30 * time.Second)
	err := recv(t, h.errs, "OnError after 30s")
	if !errors.Is(err, keepalive.ErrHung) || !strings.Contains(err.Error(), "callback hung after 30s") {
		t.Fatalf("OnError(%v), want ErrHung after 30s", err)
	}
	recv(t, cancelled, "the callback's ctx cancelled")
	h.waitEvent("a1", keepalive.EventRetrying, 1)
}

// TestHungCallbackRetried checks that a callback still running after
// CallbackTimeout is abandoned: its ctx is cancelled, the attempt is recorded
// as failed like a returned error, the metric counts it, and the schedule
// fires again. Two callbacks: one that returns when its ctx ends, one that
// ignores ctx and never returns until the test ends.
func TestHungCallbackRetried(t *testing.T) {
	tests := []struct {
		name  string
		block func(hold <-chan struct{}) func(ctx context.Context, n int)
	}{
		{"honours ctx", func(<-chan struct{}) func(ctx context.Context, n int) {
			return func(ctx context.Context, n int) {
				if n == 1 {
					<-ctx.Done()
				}
			}
		}},
		{"ignores ctx", func(hold <-chan struct{}) func(ctx context.Context, n int) {
			return func(_ context.Context, n int) {
				if n == 1 {
					<-hold
				}
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t)
			hold := make(chan struct{})
			t.Cleanup(func() { close(hold) }) // after h.stop: Run does not wait for it
			h.setBlock(tt.block(hold))
			h.start(keepalive.SchedulerConfig{CallbackTimeout: 10 * time.Second, BackoffBase: time.Second})
			sc := h.schedule("a1", keepalive.Spec{Callback: "tick", Every: time.Minute})

			h.clk.Advance(time.Minute)
			if got := recv(t, h.fires, "first fire"); got.ID != sc.ID || got.Attempts != 0 {
				t.Fatalf("fired %s with %d attempts, want %s with 0", got.ID, got.Attempts, sc.ID)
			}
			h.clk.Advance(10 * time.Second) // the callback's bound
			err := recv(t, h.errs, "OnError")
			var fe *keepalive.FireError
			if !errors.As(err, &fe) || !errors.Is(err, keepalive.ErrHung) || fe.Attempts != 1 || fe.Final {
				t.Fatalf("OnError(%v), want a FireError of attempt 1 wrapping ErrHung", err)
			}
			ev := h.waitEvent("a1", keepalive.EventRetrying, 1)
			var d keepalive.OutcomeData
			if err := ev.Decode(&d); err != nil {
				t.Fatal(err)
			}
			if d.Attempts != 1 || !strings.Contains(d.Error, "callback hung after 10s") {
				t.Fatalf("retrying data = %+v, want attempt 1 with a hung error", d)
			}
			if got := metricValue(t, h.reg, "forever_keepalive_callbacks_hung_total", ""); got != 1 {
				t.Fatalf("callbacks_hung_total = %v, want 1", got)
			}
			// The schedule is no longer in flight: the retry fires (and
			// succeeds), then the next interval.
			h.clk.Advance(time.Second)
			if got := recv(t, h.fires, "retry"); got.ID != sc.ID || got.Attempts != 1 {
				t.Fatalf("fired %s with %d attempts, want %s with 1", got.ID, got.Attempts, sc.ID)
			}
			h.waitEvent("a1", keepalive.EventFired, 1)
			// A retry moves the grid: the next occurrence is an interval
			// after the successful retry.
			next := h.clk.Now().Add(time.Minute)
			if l := h.list("a1"); len(l) != 1 || l[0].Attempts != 0 || !l[0].NextAt.Equal(next) {
				t.Fatalf("List = %+v, want attempts reset, next at %v", l, next)
			}
			h.clk.Advance(time.Minute)
			recv(t, h.fires, "next interval")
			h.waitEvent("a1", keepalive.EventFired, 2)
			h.stop() // returns although an abandoned callback may still run
		})
	}
}
