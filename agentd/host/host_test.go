package host_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/forever-agents/forever/agentd"
	"github.com/forever-agents/forever/agentd/agentdtest"
	"github.com/forever-agents/forever/agentd/demo"
	"github.com/forever-agents/forever/agentd/host"
	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/internal/waitfor"
	"github.com/forever-agents/forever/keepalive"
	"github.com/forever-agents/forever/tracing"
)

// alarmAgent sets a schedule on "arm" and reports its firing.
type alarmAgent struct {
	env   *host.Env
	fired chan keepalive.Schedule
}

func (a *alarmAgent) HandleCommand(ctx context.Context, cmd host.Command) (any, error) {
	if cmd.Verb != "start" {
		return nil, fmt.Errorf("%w: %s", host.ErrNotFound, cmd.Verb)
	}
	return a.env.Schedules.Schedule(ctx, keepalive.Spec{Kind: keepalive.KindDelay, Callback: "ring", Payload: cmd.Data})
}

func (a *alarmAgent) OnSchedule(ctx context.Context, s keepalive.Schedule) error {
	a.fired <- s
	return nil
}

// startHost runs a daemon with a host of the steps type and an alarm type.
func startHost(t *testing.T, cfg agentd.Config, hc host.Config, fired chan keepalive.Schedule) (*agentd.Daemon, *host.Host, *nats.Conn, func() error) {
	t.Helper()
	return startHostWith(t, cfg, hc, func(h *host.Host) error {
		if err := h.Register("steps", demo.NewStepsAgent, demo.StepsVerbs...); err != nil {
			return err
		}
		if err := h.Register("alarm", func(_ context.Context, env *host.Env) (host.Agent, error) {
			return &alarmAgent{env: env, fired: fired}, nil
		}, "start", "snooze"); err != nil {
			return err
		}
		// snooze stands for an internal verb: served, not listed.
		return h.SetUnlisted("snooze")
	})
}

// startHostWith is startHost with the agent types register registers.
func startHostWith(t *testing.T, cfg agentd.Config, hc host.Config, register func(*host.Host) error) (*agentd.Daemon, *host.Host, *nats.Conn, func() error) {
	t.Helper()
	d, err := agentd.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h := host.New(hc)
	if err := register(h); err != nil {
		t.Fatal(err)
	}
	if err := h.Attach(d); err != nil {
		t.Fatal(err)
	}
	stop := agentdtest.Start(t, d)
	agentdtest.WaitStatus(t, "http://"+d.HTTPAddr()+"/readyz", 200)
	nc, err := nats.Connect(d.NATSURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return d, h, nc, stop
}

// request sends a command and returns the reply body and the error code
// header ("" on success).
func request(t *testing.T, nc *nats.Conn, agent, verb string, data []byte) ([]byte, string) {
	t.Helper()
	msg, err := nc.Request("forever.cmd."+agent+"."+verb, data, 10*time.Second)
	if err != nil {
		t.Fatalf("%s %s: %v", agent, verb, err)
	}
	return msg.Data, msg.Header.Get("Nats-Service-Error-Code")
}

func TestHostCommands(t *testing.T) {
	_, h, nc, _ := startHost(t, agentdtest.Config(t), host.Config{}, make(chan keepalive.Schedule, 1))
	body, code := request(t, nc, "steps:x", "start", []byte(`{"steps":3,"delayMs":0}`))
	if code != "" {
		t.Fatalf("start: %s %s", code, body)
	}
	var started struct{ Fiber string }
	json.Unmarshal(body, &started)
	if started.Fiber == "" {
		t.Fatalf("start reply %s", body)
	}
	waitFibersDone(t, nc, "steps:x")
	body, code = request(t, nc, "steps:x", "status", nil)
	var st host.Status
	if err := json.Unmarshal(body, &st); err != nil || code != "" || st.Type != "steps" || st.Agent != "steps:x" {
		t.Fatalf("status: %s %s", code, body)
	}

	// Bad input gets a code and a message a person can act on.
	tests := []struct {
		name, agent, verb string
		data              []byte
		code, contains    string
	}{
		{"malformed json", "steps:x", "start", []byte(`{"steps":`), "400", "not valid JSON"},
		{"bad field", "steps:x", "start", []byte(`{"steps":-1}`), "400", "steps must be"},
		{"bad effect", "steps:x", "start", []byte(`{"steps":1,"effect":"boom"}`), "400", "effect must be"},
		{"unknown agent", "nobody", "status", nil, "404", "no agent type claims"},
		{"unknown verb for type", "steps:x", "snooze", []byte(`{}`), "404", "agent type steps takes no command"},
		{"oversized", "steps:x", "start", []byte(`"` + strings.Repeat("x", host.MaxCommandBytes) + `"`), "413", "limit is"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body, code := request(t, nc, tt.agent, tt.verb, tt.data)
			if code != tt.code || !strings.Contains(string(body), tt.contains) {
				t.Fatalf("got %s %s, want %s containing %q", code, body, tt.code, tt.contains)
			}
		})
	}
	if _, err := h.Command(t.Context(), host.Command{Agent: "a.b", Verb: "status"}); !errors.Is(err, host.ErrBadRequest) {
		t.Fatalf("bad agent id: %v", err)
	}
	// The failed commands appended nothing: one fiber's worth of events only.
	body, _ = request(t, nc, "steps:x", "fibers", nil)
	if string(body) != "[]" {
		t.Fatalf("fibers after bad commands: %s", body)
	}
}

func TestHostIdleDeactivation(t *testing.T) {
	_, h, nc, _ := startHost(t, agentdtest.Config(t), host.Config{IdleTimeout: 100 * time.Millisecond}, make(chan keepalive.Schedule, 1))
	if _, code := request(t, nc, "steps:idle", "start", []byte(`{"steps":3,"delayMs":150}`)); code != "" {
		t.Fatal(code)
	}
	// Held active by the fiber's keepalive for ~450ms, well past the timeout.
	// Not a synchronisation: three idle timeouts pass, to show that none
	// deactivates the agent while its fiber runs.
	time.Sleep(300 * time.Millisecond)
	if !h.Active("steps:idle") {
		t.Fatal("agent deactivated while its fiber runs")
	}
	waitfor.True(t, "the agent to go idle after its fiber finished", func() bool { return !h.Active("steps:idle") })
	// Used again, it is activated again.
	if _, code := request(t, nc, "steps:idle", "start", []byte(`{"steps":1,"delayMs":0}`)); code != "" {
		t.Fatal(code)
	}
}

func TestHostRoutesSchedules(t *testing.T) {
	fired := make(chan keepalive.Schedule, 1)
	_, _, nc, _ := startHost(t, agentdtest.Config(t), host.Config{IdleTimeout: 50 * time.Millisecond}, fired)
	if body, code := request(t, nc, "alarm:1", "start", []byte(`{"n":1}`)); code != "" {
		t.Fatalf("%s %s", code, body)
	}
	select {
	case s := <-fired:
		if s.Agent != "alarm:1" || s.Callback != "ring" || string(s.Payload) != `{"n":1}` {
			t.Fatalf("fired %+v", s)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("schedule did not fire")
	}
}

// A graceful stop interrupts running fibers; they stay in the runs table and
// are recovered on the next start from their last snapshot.
func TestHostRecoversAfterRestart(t *testing.T) {
	cfg := agentdtest.Config(t)
	_, _, nc, stop := startHost(t, cfg, host.Config{}, make(chan keepalive.Schedule, 1))
	if _, code := request(t, nc, "steps:r", "start", []byte(`{"steps":5,"delayMs":100}`)); code != "" {
		t.Fatal(code)
	}
	// Stop once a step is done, so the next start resumes mid-way.
	waitfor.True(t, "a step of steps:r to complete", func() bool {
		var p host.LogPage
		body, code := request(t, nc, "steps:r", "log", []byte(`{"limit":1000}`))
		if err := json.Unmarshal(body, &p); err != nil || code != "" {
			t.Fatalf("log: %s %s", code, body)
		}
		return slices.ContainsFunc(p.Events, func(e host.LogEvent) bool { return e.Type == "op.completed" })
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	nc.Close()
	_, _, nc, _ = startHost(t, cfg, host.Config{}, make(chan keepalive.Schedule, 1))
	waitFibersDone(t, nc, "steps:r")
}

// waitFibersDone waits until agent lists no fiber: its fibers finished.
func waitFibersDone(t *testing.T, nc *nats.Conn, agent string) {
	t.Helper()
	waitfor.NoError(t, func() error {
		if body, _ := request(t, nc, agent, "fibers", nil); string(body) != "[]" {
			return fmt.Errorf("the fibers of %s to finish: %s", agent, body)
		}
		return nil
	})
}

// TestStepsEffectNone: a steps fiber started with "effect": "none" runs
// its steps (an op.started and an op.completed each) with a body that
// writes nothing, like the activity of the Temporal bench; the default
// body appends one steps.executed per step.
func TestStepsEffectNone(t *testing.T) {
	_, _, nc, _ := startHost(t, agentdtest.Config(t), host.Config{}, make(chan keepalive.Schedule, 1))
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		agent, payload string
		executed       int
	}{
		{"steps:none", `{"steps":3,"delayMs":0,"effect":"none"}`, 0},
		{"steps:event", `{"steps":3,"delayMs":0}`, 3},
	} {
		if body, code := request(t, nc, tc.agent, "start", []byte(tc.payload)); code != "" {
			t.Fatalf("%s start: %s %s", tc.agent, code, body)
		}
		var types map[string]int
		waitfor.NoError(t, func() error {
			if types = eventTypes(t, js, "forever.evt."+tc.agent); types["fiber.completed"] == 0 {
				return fmt.Errorf("%s: the fiber to complete: %v", tc.agent, types)
			}
			return nil
		})
		if types[demo.EventStepExecuted] != tc.executed || types["op.completed"] != 3 {
			t.Errorf("%s: events %v, want %d %s and 3 op.completed", tc.agent, types, tc.executed, demo.EventStepExecuted)
		}
	}
}

// eventTypes counts the types of the events stored on subject.
func eventTypes(t *testing.T, js jetstream.JetStream, subject string) map[string]int {
	t.Helper()
	c, err := js.OrderedConsumer(t.Context(), "FOREVER_EVENTS", jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject}})
	if err != nil {
		t.Fatal(err)
	}
	types := map[string]int{}
	for {
		m, err := c.Next(jetstream.FetchMaxWait(200 * time.Millisecond))
		if err != nil {
			return types
		}
		types[m.Headers().Get(eventlog.HeaderType)]++
	}
}

// TestHostTracesCommands: with Config.TrustTraceparent, a command's
// traceparent header (any case) makes the command's span its child, and the reply (an error reply too) names
// the trace; a command forwarded by another node continues the forwarding
// span's trace the same way, marked forwarded; the fiber the command
// starts traces its steps in that trace.
func TestHostTracesCommands(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithIDGenerator(tracing.IDGenerator{}))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	cfg := agentdtest.Config(t)
	cfg.TracerProvider = tp
	cfg.TrustTraceparent = true
	d, _, nc, _ := startHost(t, cfg, host.Config{}, make(chan keepalive.Schedule, 1))

	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	send := func(subject, parent string, data []byte) *nats.Msg {
		t.Helper()
		m := nats.NewMsg(subject)
		m.Data = data
		m.Header["TraceParent"] = []string{"00-" + traceID + "-" + parent + "-01"}
		resp, err := nc.RequestMsg(m, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if got := resp.Header.Get(tracing.TraceIDHeader); got != traceID {
			t.Errorf("%s: reply %s = %q, want %s", subject, tracing.TraceIDHeader, got, traceID)
		}
		return resp
	}
	if resp := send("forever.cmd.steps:x.start", "00f067aa0ba902b7", []byte(`{"steps":2,"delayMs":0}`)); resp.Header.Get("Nats-Service-Error-Code") != "" {
		t.Fatalf("start: %s", resp.Data)
	}
	if resp := send("forever.cmd.steps:x.start", "00f067aa0ba902b7", []byte(`{"steps":-1}`)); resp.Header.Get("Nats-Service-Error-Code") != "400" {
		t.Fatalf("bad start: %s", resp.Data)
	}
	node := d.Config().ServerName
	if resp := send("forever.node."+node+".cmd.steps:x.status", "b7ad6b7169203331", nil); resp.Header.Get("Nats-Service-Error-Code") != "" {
		t.Fatalf("forwarded status: %s", resp.Data)
	}

	var steps int
	waitfor.True(t, "the fiber's two fiber.step spans", func() bool {
		steps = 0
		for _, s := range exp.GetSpans() {
			if s.Name == "fiber.step" {
				steps++
			}
		}
		return steps >= 2
	})
	var commands []string
	for _, s := range exp.GetSpans() {
		if s.SpanContext.TraceID().String() != traceID {
			t.Errorf("span %s in trace %s", s.Name, s.SpanContext.TraceID())
		}
		if strings.HasPrefix(s.Name, "command ") {
			fwd := false
			for _, kv := range s.Attributes {
				if kv.Key == tracing.Forwarded {
					fwd = kv.Value.AsBool()
				}
			}
			commands = append(commands, fmt.Sprintf("%s %s %v", s.Name, s.Parent.SpanID(), fwd))
		}
	}
	want := []string{"command start 00f067aa0ba902b7 false", "command start 00f067aa0ba902b7 false", "command status b7ad6b7169203331 true"}
	if strings.Join(commands, ",") != strings.Join(want, ",") {
		t.Errorf("command spans %q, want %q", commands, want)
	}
	if steps < 2 {
		t.Errorf("%d fiber.step spans in the trace, want the fiber's 2", steps)
	}
}

// TestHostLinksClientTraceparent: without Config.TrustTraceparent, a
// client's traceparent does not parent the command's span: the span starts
// a trace of its own, links to the client's span, and the reply names the
// new trace.
func TestHostLinksClientTraceparent(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithIDGenerator(tracing.IDGenerator{}))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	cfg := agentdtest.Config(t)
	cfg.TracerProvider = tp
	_, _, nc, _ := startHost(t, cfg, host.Config{}, make(chan keepalive.Schedule, 1))

	const clientTrace, clientSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	m := nats.NewMsg("forever.cmd.steps:x.start")
	m.Data = []byte(`{"steps":1,"delayMs":0}`)
	m.Header.Set("traceparent", "00-"+clientTrace+"-"+clientSpan+"-01")
	resp, err := nc.RequestMsg(m, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	got := resp.Header.Get(tracing.TraceIDHeader)
	if got == "" || got == clientTrace {
		t.Errorf("reply %s = %q, want a trace of agentd's own", tracing.TraceIDHeader, got)
	}
	var command *tracetest.SpanStub
	waitfor.True(t, "a command span", func() bool {
		for _, s := range exp.GetSpans() {
			if s.Name == "command start" {
				command = &s
			}
		}
		return command != nil
	})
	if command.SpanContext.TraceID().String() != got || command.Parent.IsValid() {
		t.Errorf("command span in %s under %v, want the root of trace %s", command.SpanContext.TraceID(), command.Parent, got)
	}
	if len(command.Links) != 1 || command.Links[0].SpanContext.TraceID().String() != clientTrace || command.Links[0].SpanContext.SpanID().String() != clientSpan {
		t.Errorf("command span links %+v, want the client's span %s/%s", command.Links, clientTrace, clientSpan)
	}
}

// TestHostPartitionsRecovered: forever_agentd_partitions_recovered counts
// the partitions the node holds whose recovery finished, so it reaches
// forever_ownership_partitions_owned once every partition acquired has
// caught its views up and recovered its agents (what a restart waits for
// before it counts as done: bench restart-share).
func TestHostPartitionsRecovered(t *testing.T) {
	cfg := agentdtest.Config(t)
	reg := prometheus.NewRegistry()
	cfg.Registerer, cfg.Gatherer = reg, reg
	startHost(t, cfg, host.Config{}, make(chan keepalive.Schedule, 1))
	gauge := func(name string) (float64, bool) {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == name && len(mf.GetMetric()) == 1 {
				return mf.GetMetric()[0].GetGauge().GetValue(), true
			}
		}
		return 0, false
	}
	waitfor.NoError(t, func() error {
		owned, _ := gauge("forever_ownership_partitions_owned")
		recovered, ok := gauge("forever_agentd_partitions_recovered")
		if !ok || owned == 0 || recovered != owned {
			return fmt.Errorf("partitions recovered %v (registered %t), owned %v: want every owned one recovered", recovered, ok, owned)
		}
		return nil
	})
}
