package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"

	"github.com/forever-agents/forever/agentd/agentdtest"
	"github.com/forever-agents/forever/agentd/demo"
	"github.com/forever-agents/forever/agentd/host"
	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/fiber"
	"github.com/forever-agents/forever/internal/waitfor"
)

// agentdProc is a running agentd binary.
type agentdProc struct {
	cmd    *exec.Cmd
	out    *agentdtest.SyncBuffer
	exited chan error
}

// startAgentd starts bin on data with fixed ports, JSON logs and the extra
// flags, and waits for /readyz.
func startAgentd(t *testing.T, bin, data, httpAddr, natsAddr string, extra ...string) *agentdProc {
	t.Helper()
	p := &agentdProc{out: &agentdtest.SyncBuffer{}, exited: make(chan error, 1)}
	args := append([]string{"--data", data, "--http", httpAddr, "--nats-listen", natsAddr, "--log-format", "json"}, extra...)
	p.cmd = exec.Command(bin, args...)
	p.cmd.Env = append(os.Environ(), "FOREVER_LOG_LEVEL=info")
	if slices.Contains(extra, "--auth") && !slices.Contains(extra, "--metrics-listen") {
		// Under --auth /metrics has a listener of its own, by default on
		// a fixed loopback port: take a free one.
		p.cmd.Env = append(p.cmd.Env, "FOREVER_METRICS_LISTEN=127.0.0.1:0")
	}
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	return startWith(t, p, httpAddr)
}

// startWith starts a prepared agentd command and waits for /readyz.
func startWith(t *testing.T, p *agentdProc, httpAddr string) *agentdProc {
	t.Helper()
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.exited <- p.cmd.Wait() }()
	t.Cleanup(func() { p.kill() })
	waitfor.Within(t, 60*time.Second, func() error {
		if resp, err := http.Get("http://" + httpAddr + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case err := <-p.exited:
			p.exited <- err
			t.Fatalf("agentd exited before ready: %v\n%s", err, p.out.String())
		default:
		}
		return fmt.Errorf("agentd to be ready:\n%s", p.out.String())
	})
	return p
}

// kill sends SIGKILL and waits for the process to be gone.
func (p *agentdProc) kill() {
	if p.cmd.ProcessState != nil {
		return
	}
	p.cmd.Process.Signal(syscall.SIGKILL)
	err := <-p.exited
	p.exited <- err
}

// crashClient reads the log of a running agentd over NATS.
type crashClient struct {
	t  *testing.T
	nc *nats.Conn
	lg *eventlog.Log
	// timeout of a command request; 0 is 10s.
	timeout time.Duration
}

func dialAgentd(t *testing.T, natsAddr string) *crashClient {
	t.Helper()
	nc, err := nats.Connect("nats://"+natsAddr, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	lg, err := eventlog.Open(t.Context(), eventlog.Config{Conn: nc})
	if err != nil {
		t.Fatal(err)
	}
	return &crashClient{t: t, nc: nc, lg: lg}
}

func (c *crashClient) command(agent, verb string, v any) json.RawMessage {
	c.t.Helper()
	data, _ := json.Marshal(v)
	var msg *nats.Msg
	var err error
	deadline := time.Now().Add(60 * time.Second)
	key := nuid.Next() // one command, however often it is sent
	for range 50 {     // the server may be restarting, the agent moving (503)
		if time.Now().After(deadline) {
			break
		}
		timeout := c.timeout
		if timeout == 0 {
			timeout = 10 * time.Second
		}
		req := nats.NewMsg(fmt.Sprintf("forever.cmd.%s.%s", agent, verb))
		req.Data = data
		req.Header.Set(host.HeaderIdempotencyKey, key)
		msg, err = c.nc.RequestMsg(req, timeout)
		code := ""
		if err == nil {
			code = msg.Header.Get("Nats-Service-Error-Code")
		}
		// 504 (the owner did not answer a forwarded command in time, as
		// when it just died) may have run: sent again with the same
		// Idempotency-Key, a chat is stored once; reads write nothing.
		if err == nil && code != "503" && code != "504" {
			break
		}
		if err != nil {
			c.t.Logf("%s %s: %v; retrying", agent, verb, err)
		} else {
			c.t.Logf("%s %s: %s; retrying", agent, verb, msg.Data)
		}
		time.Sleep(100 * time.Millisecond) // not a synchronisation: a retry's backoff
	}
	if err != nil {
		c.t.Fatalf("%s %s: %v", agent, verb, err)
	}
	if code := msg.Header.Get("Nats-Service-Error-Code"); code != "" {
		c.t.Fatalf("%s %s: error %s: %s", agent, verb, code, msg.Data)
	}
	return msg.Data
}

func (c *crashClient) events(agent string) []eventlog.Event {
	c.t.Helper()
	for range 100 { // the server may be restarting, or electing a leader
		evs, err := c.lg.Read(c.t.Context(), eventlog.Filter{Agent: agent}, 0, 0)
		if err == nil {
			return evs
		}
		time.Sleep(200 * time.Millisecond) // not a synchronisation: a retry's backoff
	}
	c.t.Fatalf("read events of %s", agent)
	return nil
}

// waitFor polls the agents' events until cond holds.
func (c *crashClient) waitFor(what string, agents []string, cond func([]eventlog.Event) bool) {
	c.t.Helper()
	waitfor.Within(c.t, 60*time.Second, func() error {
		var all []eventlog.Event
		for _, a := range agents {
			all = append(all, c.events(a)...)
		}
		if !cond(all) {
			return errors.New(what)
		}
		return nil
	})
}

type fiberEvent struct {
	ID       string          `json:"id"`
	Attempt  int             `json:"attempt"`
	Snapshot json.RawMessage `json:"snapshot"`
	Fiber    string          `json:"fiber"`
	OpID     string          `json:"opId"`
}

func decodeFE(e eventlog.Event) fiberEvent {
	var fe fiberEvent
	json.Unmarshal(e.Data, &fe)
	return fe
}

func count(evs []eventlog.Event, typ string, fiberID string) int {
	n := 0
	for _, e := range evs {
		if e.Type != typ {
			continue
		}
		fe := decodeFE(e)
		var se demo.StepExecuted
		json.Unmarshal(e.Data, &se)
		if fe.ID == fiberID || fe.Fiber == fiberID || se.Fiber == fiberID {
			n++
		}
	}
	return n
}

// testBinaryCrashRecovery: steps fibers in flight when agentd is SIGKILLed
// are recovered after the restart exactly once per crash with their last
// stashed snapshot, finish the remaining steps, and no completed step runs
// again; also when the kill lands during recovery itself.
func testBinaryCrashRecovery(t *testing.T, bin string) {
	data := filepath.Join(t.TempDir(), "data")
	httpAddr, natsAddr := agentdtest.FreeAddr(t), agentdtest.FreeAddr(t)
	const steps = 12
	agents := []string{"steps:a", "steps:b"}

	p := startAgentd(t, bin, data, httpAddr, natsAddr)
	c := dialAgentd(t, natsAddr)
	// Three fibers in flight: two on one agent, one on another. Recovery
	// waits 1.5s before resuming, so the test can kill during it.
	type started struct{ agent, fiber string }
	var fibers []started
	for _, a := range []string{agents[0], agents[0], agents[1]} {
		var r struct{ Fiber string }
		json.Unmarshal(c.command(a, "start", demo.StepsStart{Steps: steps, DelayMS: 120, RecoveryDelayMS: 1500}), &r)
		if r.Fiber == "" {
			t.Fatal("start returned no fiber id")
		}
		fibers = append(fibers, started{a, r.Fiber})
	}
	allDone := func(min int) func([]eventlog.Event) bool {
		return func(evs []eventlog.Event) bool {
			for _, f := range fibers {
				if count(evs, demo.EventStepExecuted, f.fiber) < min {
					return false
				}
			}
			return true
		}
	}

	// Crash 1: mid-run.
	c.waitFor("3 steps of every fiber", agents, allDone(3))
	p.kill()
	crashes := 1

	// Crash 2: during recovery (fiber.recovered appended, hook still waiting).
	p = startAgentd(t, bin, data, httpAddr, natsAddr)
	c.waitFor("recovery of every fiber to start", agents, func(evs []eventlog.Event) bool {
		for _, f := range fibers {
			if count(evs, fiber.EventRecovered, f.fiber) < 1 {
				return false
			}
		}
		return true
	})
	p.kill()
	crashes++

	// Crash 3: mid-run again, after the resumed fibers made progress.
	p = startAgentd(t, bin, data, httpAddr, natsAddr)
	c.waitFor("6 steps of every fiber", agents, allDone(6))
	p.kill()
	crashes++

	p = startAgentd(t, bin, data, httpAddr, natsAddr)
	c.waitFor("every fiber to complete", agents, func(evs []eventlog.Event) bool {
		for _, f := range fibers {
			if count(evs, fiber.EventCompleted, f.fiber) != 1 {
				return false
			}
		}
		return true
	})

	var evs []eventlog.Event
	for _, a := range agents {
		evs = append(evs, c.events(a)...)
	}
	for _, f := range fibers {
		checkRecoveredFiber(t, evs, f.fiber, steps, crashes)
	}
	// The runs table is empty and the fibers command says so.
	for _, a := range agents {
		var rows []host.FiberInfo
		json.Unmarshal(c.command(a, "fibers", nil), &rows)
		if len(rows) != 0 {
			t.Errorf("%s still has fibers: %+v", a, rows)
		}
	}
	verifyLog(t, c)
	if t.Failed() {
		t.Logf("agentd output:\n%s", p.out.String())
	}
}

// checkRecoveredFiber checks one fiber's history after the crashes.
func checkRecoveredFiber(t *testing.T, evs []eventlog.Event, id string, steps, crashes int) {
	t.Helper()
	var lastSnap demo.StepsState
	completedOps := map[string]eventlog.Seq{}
	executed := map[int]int{}
	recoveredAttempts, hookCalls, hooksThisAttempt := []int{}, 0, 0
	// The attempt count goes up one by one and starts over at 1 once the
	// fiber made progress (a step completed) since the last recovery.
	wantAttempts, progressed := []int{}, false
	for _, e := range evs {
		fe := decodeFE(e)
		switch e.Type {
		case fiber.EventStashed, fiber.EventStarted:
			if fe.ID == id && fe.Snapshot != nil { // fiber.started: WithSnapshot
				json.Unmarshal(fe.Snapshot, &lastSnap)
			}
		case fiber.EventRecovered:
			if fe.ID == id {
				want := 1
				if n := len(recoveredAttempts); n > 0 && !progressed {
					want = recoveredAttempts[n-1] + 1
				}
				wantAttempts = append(wantAttempts, want)
				recoveredAttempts = append(recoveredAttempts, fe.Attempt)
				hooksThisAttempt, progressed = 0, false
			}
		case demo.EventStepsRecovered:
			var r demo.StepsRecovered
			json.Unmarshal(e.Data, &r)
			if r.Fiber != id {
				continue
			}
			hookCalls++
			hooksThisAttempt++
			if hooksThisAttempt > 1 || len(recoveredAttempts) == 0 || r.Attempt != recoveredAttempts[len(recoveredAttempts)-1] {
				t.Errorf("fiber %s: hook ran for attempt %d, recoveries so far %v, %d times for this one", id, r.Attempt, recoveredAttempts, hooksThisAttempt)
			}
			// The hook got the last snapshot stashed before it.
			if r.Done != lastSnap.Done {
				t.Errorf("fiber %s: hook got done=%d, last stash before it was %d", id, r.Done, lastSnap.Done)
			}
		case fiber.EventOpCompleted:
			if fe.Fiber == id {
				completedOps[fe.OpID] = e.Seq
				progressed = true
				if fe.Snapshot != nil { // stashed with the step (ThenStash)
					json.Unmarshal(fe.Snapshot, &lastSnap)
				}
			}
		case demo.EventStepExecuted:
			var se demo.StepExecuted
			json.Unmarshal(e.Data, &se)
			if se.Fiber != id {
				continue
			}
			executed[se.Step]++
			// No completed step runs again.
			if seq, done := completedOps[se.OpID]; done && seq < e.Seq {
				t.Errorf("fiber %s: step %d ran at seq %d after its op completed at seq %d", id, se.Step, e.Seq, seq)
			}
		}
	}
	for s := range steps {
		if executed[s] == 0 {
			t.Errorf("fiber %s: step %d never ran", id, s)
		}
	}
	if lastSnap.Done != steps {
		t.Errorf("fiber %s: last snapshot done=%d, want %d", id, lastSnap.Done, steps)
	}
	// One recovery per crash, attempts counting up; the hook ran exactly
	// once for every recovery not cut short by the next kill.
	if len(recoveredAttempts) != crashes {
		t.Errorf("fiber %s: %d recoveries (attempts %v), want one per crash (%d)", id, len(recoveredAttempts), recoveredAttempts, crashes)
	}
	if !slices.Equal(recoveredAttempts, wantAttempts) {
		t.Errorf("fiber %s: recovery attempts %v, want %v (one up per recovery, 1 after progress)", id, recoveredAttempts, wantAttempts)
	}
	// One recovery was killed mid-hook (1.5s hook delay); the others ran it.
	if hookCalls != crashes-1 {
		t.Errorf("fiber %s: hook completed %d times, want %d", id, hookCalls, crashes-1)
	}
}
