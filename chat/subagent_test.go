package chat_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/forever-agents/forever/chat"
	"github.com/forever-agents/forever/chat/chunk"
	"github.com/forever-agents/forever/chat/llm"
	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/internal/waitfor"
	"github.com/forever-agents/forever/verify"
)

// mesh hosts agents in one process the way agentd does: an agent is
// activated on first use (a command, a child's notice) and recovers its
// turns then; deactivate drops it (its fibers interrupted). It is the
// chat.Peers of every agent it hosts.
type mesh struct {
	t        *testing.T
	e        *env
	provider func(agent string) llm.Provider
	opt      func(*chat.Config)

	mu    sync.Mutex
	hosts map[string]*host
	sent  map[string]int // StartChild calls per child request id
	// crash names the crash point at which the next host of an agent
	// stops, as a process dying there (crashed is told).
	crash   map[string]string
	crashed chan string
}

func newMesh(t *testing.T, e *env, provider func(agent string) llm.Provider) *mesh {
	return &mesh{t: t, e: e, provider: provider, hosts: map[string]*host{}, sent: map[string]int{},
		crash: map[string]string{}, crashed: make(chan string, 1)}
}

// get returns the agent's host, activating it (and recovering its fibers
// in the background) when it is not active.
func (m *mesh) get(agent string) *host {
	m.mu.Lock()
	defer m.mu.Unlock()
	if h, ok := m.hosts[agent]; ok {
		return h
	}
	tools, err := chat.AgentTool()
	if err != nil {
		m.t.Fatal(err)
	}
	reg, err := chat.NewTools(tools)
	if err != nil {
		m.t.Fatal(err)
	}
	h := m.e.host(m.t, agent, m.provider(agent), func(c *chat.Config) {
		c.Peers, c.Tools, c.ChildPoll = m, reg, time.Hour // notices only: a lost one would hang the test
		if m.opt != nil {
			m.opt(c)
		}
	})
	m.hosts[agent] = h
	if point, ok := m.crash[agent]; ok {
		delete(m.crash, agent)
		chat.StopAt(h.a, func(ctx context.Context, p string) error {
			if p != point {
				return nil
			}
			m.crashed <- p
			<-ctx.Done()
			return ctx.Err()
		})
	}
	go h.r.Recover(context.Background())
	return h
}

// deactivate drops the agent, as the host does an idle one.
func (m *mesh) deactivate(agent string) {
	m.mu.Lock()
	h := m.hosts[agent]
	delete(m.hosts, agent)
	m.mu.Unlock()
	if h != nil {
		h.r.Close()
	}
}

func (m *mesh) StartChild(ctx context.Context, child string, req chat.ChildRequest) (chat.Turn, error) {
	m.mu.Lock()
	m.sent[req.RequestID]++
	m.mu.Unlock()
	// As over NATS in agentd, the child's node handles the command with
	// a context of its own: a caller that dies (a crash point cancels the
	// parent's) does not cancel the child's start halfway. Cancelled, it
	// could leave the child's turn fiber orphaned after fiber.started,
	// which agentd's host recovers by restarting the agent, and nothing
	// here does (TestSubagentCrashPoints/child-started failed so once).
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	turn, err := m.get(child).a.Send(ctx, chat.SendRequest{Text: req.Text, RequestID: req.RequestID, Parent: &req.Parent})
	if errors.Is(err, chat.ErrInvalidMessage) || errors.Is(err, chat.ErrTurnActive) {
		err = fmt.Errorf("%w: %w", chat.ErrChildRefused, err)
	}
	return turn, err
}

func (m *mesh) CancelChild(ctx context.Context, child, requestID string) error {
	_, err := m.get(child).a.CancelTurn(ctx, requestID)
	return err
}

func (m *mesh) NotifyParent(ctx context.Context, parent string, n chat.ChildNotice) error {
	return m.get(parent).a.ChildEnded(ctx, n)
}

// local is the local model, as fast as possible.
func local(string) llm.Provider { return llm.NewLocal(llm.LocalConfig{Rate: -1}) }

// awaitTurn waits until agent's last turn has ended and returns it.
func awaitTurn(t *testing.T, e *env, agent string) chat.TurnInfo {
	t.Helper()
	var tr chat.TurnInfo
	waitfor.True(t, "the turn of "+agent+" to end", func() bool {
		settled(t, e, agent)
		var ok bool
		var err error
		tr, ok, err = e.store.LastTurn(agent)
		return err == nil && ok && !tr.Active()
	})
	return tr
}

// turnStarts counts agent's turn.started events by request id.
func turnStarts(t *testing.T, e *env, agent string) map[string]int {
	t.Helper()
	evs, err := e.lg.Read(t.Context(), eventlog.Filter{Agent: agent}, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, ev := range evs {
		if ev.Type == chat.EventTurnStarted {
			var d struct{ RequestID string }
			json.Unmarshal(ev.Data, &d)
			out[d.RequestID]++
		}
	}
	return out
}

// childOutputs returns the outputs of the agent tool's calls in msg.
func childOutputs(t *testing.T, msg chat.Message) []chat.ChildOutput {
	t.Helper()
	var out []chat.ChildOutput
	for _, p := range msg.Parts {
		if p.Type != chat.PartTool || p.ToolName != chat.AgentToolName {
			continue
		}
		if p.State != chat.ToolOutput {
			t.Fatalf("agent call %s: %s %q", p.ToolCallID, p.State, p.ErrorText)
		}
		var o chat.ChildOutput
		if err := json.Unmarshal(p.Output, &o); err != nil {
			t.Fatal(err)
		}
		out = append(out, o)
	}
	return out
}

// TestSubagents: a parent calls two children in one step and a third in
// the next; each child answers once, the parent's one assistant message
// holds their answers (tool outputs quoting each child's final text), a
// data-subagent part names each child's turn, the links are recorded and
// ended, the parent's usage counts its children's apart, and verify finds
// the log clean.
func TestSubagents(t *testing.T) {
	e := newEnv(t)
	m := newMesh(t, e, local)
	parent := m.get("boss")
	turn, err := parent.a.Send(t.Context(), chat.SendRequest{Text: "/agent kid-a hello a\n+/agent kid-b story b\n/agent kid-c hello c"})
	if err != nil {
		t.Fatal(err)
	}
	tr := awaitTurn(t, e, "boss")
	if tr.Status != chat.TurnCompleted {
		t.Fatalf("parent turn %s: %s", tr.Status, tr.Error)
	}
	msgs := settled(t, e, "boss")
	if len(msgs) != 2 {
		t.Fatalf("parent history has %d messages, want the question and one answer", len(msgs))
	}
	outs := childOutputs(t, msgs[1])
	if len(outs) != 3 {
		t.Fatalf("%d child outputs, want 3", len(outs))
	}
	for i, kid := range []string{"kid-a", "kid-b", "kid-c"} {
		o := outs[i]
		if o.Agent != kid || o.Status != chat.LinkCompleted || o.Mode != chat.ModePersistent || o.Text == "" {
			t.Errorf("output %d = %+v", i, o)
		}
		kidMsgs := settled(t, e, kid)
		if len(kidMsgs) != 2 || kidMsgs[1].Text() != o.Text {
			t.Errorf("%s answered %+v, the parent got %q", kid, kidMsgs, o.Text)
		}
		if starts := turnStarts(t, e, kid); len(starts) != 1 || starts[o.RequestID] != 1 {
			t.Errorf("%s turns started %v, want one for %s", kid, starts, o.RequestID)
		}
		if want := chat.ChildRequestID("boss", turn.RequestID, o.CallID); o.RequestID != want {
			t.Errorf("child request id %s, want %s", o.RequestID, want)
		}
		kidTurn := lastTurn(t, e, kid)
		if p := kidTurn.Parent; p == nil || p.Agent != "boss" || p.RequestID != turn.RequestID || p.CallID != o.CallID || len(p.Chain) != 1 {
			t.Errorf("%s turn's parent = %+v", kid, p)
		}
		// The local model quotes the child's text as text (its beginning,
		// for a story), not as escaped JSON.
		if quote := "the answer of " + kid + ": " + o.Text[:min(40, len(o.Text))]; !strings.Contains(msgs[1].Text(), quote) {
			t.Errorf("the parent's answer does not quote %s (%q): %q", kid, quote, msgs[1].Text())
		}
	}
	var named []chat.ChildRef
	for _, p := range msgs[1].Parts {
		if p.Type == chat.PartSubagent {
			var ref chat.ChildRef
			json.Unmarshal(p.Data, &ref)
			if ref.CallID != p.ID || ref.StreamID == "" || ref.Status != chat.LinkCompleted {
				t.Errorf("data-subagent part %+v", p)
			}
			named = append(named, ref)
		}
	}
	if len(named) != 3 {
		t.Errorf("%d data-subagent parts, want 3", len(named))
	}
	// The stream: both children of the first step named before either
	// output, each part written twice (running, then ended).
	cs, _ := streamOf(t, e.lg, "boss", turn.StreamID)
	if n := count(cs, chat.PartSubagent); n != 6 {
		t.Errorf("%d data-subagent chunks, want 6", n)
	}
	links, err := e.store.Links("boss", turn.RequestID)
	if err != nil || len(links) != 3 {
		t.Fatalf("links %+v, %v", links, err)
	}
	var want chat.SubagentUsage
	for _, l := range links {
		if l.Status != chat.LinkCompleted || l.StartedAt.IsZero() || l.EndedAt.Before(l.StartedAt) || l.Usage == nil || l.Usage.Calls != 1 {
			t.Errorf("link %+v", l)
		}
		want.Input += l.Usage.Input
		want.Output += l.Usage.Output
		want.Calls++
	}
	tu, ok, err := e.store.TurnUsage("boss", turn.RequestID)
	if err != nil || !ok || tu.Subagents != want || tu.Input == 0 {
		t.Errorf("parent turn usage %+v %v %v, want subagents %+v", tu, ok, err, want)
	}
	if u, _ := e.store.Usage("boss"); u.Subagents != want {
		t.Errorf("parent roll-up %+v, want subagents %+v", u, want)
	}
	// The children's spend counts against the parent's budget as well as
	// against each child's own.
	if bs, err := parent.a.Budget(t.Context()); err != nil || bs.Spent.Tokens != tu.Input+tu.Output+want.Input+want.Output {
		t.Errorf("parent's budget spend %+v, %v; want its own %d and its children's %d tokens", bs.Spent, err, tu.Input+tu.Output, want.Input+want.Output)
	}
	if u, _ := e.store.Usage("kid-a"); u.Input+u.Output == 0 {
		t.Errorf("kid-a usage %+v", u)
	} else if bs, err := m.get("kid-a").a.Budget(t.Context()); err != nil || bs.Spent.Tokens != u.Input+u.Output {
		t.Errorf("kid-a's budget spend %+v, %v; want its usage %+v", bs.Spent, err, u)
	}
	st, err := parent.a.Status()
	if err != nil || len(st.Children) != 0 {
		t.Errorf("status after the turn: %+v, %v", st.Children, err)
	}
	checkClean(t, e.lg)
}

// gate is a provider that blocks an agent's answer until released, after
// announcing that it streams.
type gate struct {
	local     llm.Provider
	streaming chan string
	release   chan struct{}
}

func newGate() *gate {
	return &gate{local: llm.NewLocal(llm.LocalConfig{Rate: -1}), streaming: make(chan string, 16), release: make(chan struct{})}
}

func (g *gate) Name() string { return "gate" }

func (g *gate) Stream(ctx context.Context, req llm.Request) iter.Seq2[llm.Delta, error] {
	return func(yield func(llm.Delta, error) bool) {
		first := true
		for d, err := range g.local.Stream(ctx, req) {
			if err != nil {
				yield(d, err)
				return
			}
			if !yield(d, nil) {
				return
			}
			if first && d.Kind == llm.TextDelta {
				first = false
				g.streaming <- "x"
				select {
				case <-g.release:
				case <-ctx.Done():
					yield(llm.Delta{}, context.Cause(ctx))
					return
				}
			}
		}
	}
}

// TestSubagentParentDeactivated: a parent waiting for its child is
// deactivated (its agent dropped, the idle turn interrupted with nothing
// written); the child's notice of its end activates it again, and its
// recovered turn reads the child's answer and completes once. The wait
// holds no keepalive: the parent had released it.
func TestSubagentParentDeactivated(t *testing.T) {
	e := newEnv(t)
	g := newGate()
	m := newMesh(t, e, func(agent string) llm.Provider {
		if agent == "slow" {
			return g
		}
		return local(agent)
	})
	turn, err := m.get("boss").a.Send(t.Context(), chat.SendRequest{Text: "/agent slow hello there"})
	if err != nil {
		t.Fatal(err)
	}
	<-g.streaming
	waitfor.True(t, "the parent waiting", func() bool {
		st, err := m.get("boss").a.Status()
		return err == nil && len(st.Children) == 1 && st.Children[0].Agent == "slow"
	})
	m.deactivate("boss")
	if rows := runs(t, e, "boss"); len(rows) != 1 {
		t.Fatalf("the waiting parent's fiber rows: %+v", rows)
	}
	close(g.release)
	tr := awaitTurn(t, e, "boss")
	if tr.Status != chat.TurnCompleted {
		t.Fatalf("parent turn %s: %s", tr.Status, tr.Error)
	}
	msgs := settled(t, e, "boss")
	if outs := childOutputs(t, msgs[len(msgs)-1]); len(outs) != 1 || outs[0].Text != llm.NewLocal(llm.LocalConfig{}).Answer(llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Parts: []llm.Part{{Text: "hello there"}}}}}) {
		t.Fatalf("outputs %+v", outs)
	}
	if n := turnStarts(t, e, "boss")[turn.RequestID]; n != 1 {
		t.Errorf("the parent's turn started %d times", n)
	}
	for req, n := range m.sent {
		if n != 1 {
			t.Errorf("child turn %s sent %d times, want once: the resumed parent found its link", req, n)
		}
	}
	checkClean(t, e.lg)
}

// TestSubagentCancel: cancelling a parent that waits for its child stops
// the child's turn too (interrupted), and records the link cancelled;
// Config.OnLink is told of the link's start and of its end.
func TestSubagentCancel(t *testing.T) {
	e := newEnv(t)
	g := newGate()
	m := newMesh(t, e, func(agent string) llm.Provider {
		if agent == "slow" {
			return g
		}
		return local(agent)
	})
	var linkMu sync.Mutex
	var reported []string
	m.opt = func(c *chat.Config) {
		if c.Agent != "boss" {
			return
		}
		c.OnLink = func(_ context.Context, typ string, l chat.ChildLink) {
			linkMu.Lock()
			defer linkMu.Unlock()
			reported = append(reported, typ+" "+l.Agent+" "+l.Status)
		}
	}
	boss := m.get("boss")
	turn, err := boss.a.Send(t.Context(), chat.SendRequest{Text: "/agent slow tell me a story"})
	if err != nil {
		t.Fatal(err)
	}
	<-g.streaming
	waitfor.True(t, "the parent waiting", func() bool {
		st, err := boss.a.Status()
		return err == nil && len(st.Children) == 1
	})
	if ok, err := boss.a.Cancel(t.Context()); err != nil || !ok {
		t.Fatalf("cancel: %v %v", ok, err)
	}
	if tr := awaitTurn(t, e, "boss"); tr.Status != chat.TurnInterrupted {
		t.Fatalf("parent turn %s", tr.Status)
	}
	if tr := awaitTurn(t, e, "slow"); tr.Status != chat.TurnInterrupted {
		t.Fatalf("child turn %s, want interrupted", tr.Status)
	}
	links, _ := e.store.Links("boss", turn.RequestID)
	if len(links) != 1 || links[0].Status != chat.LinkCancelled {
		t.Fatalf("links %+v", links)
	}
	storedCancelled(t, e, "boss", turn)
	linkMu.Lock()
	got := strings.Join(reported, ", ")
	linkMu.Unlock()
	if want := chat.EventSubagentStarted + " slow running, " + chat.EventSubagentEnded + " slow cancelled"; got != want {
		t.Errorf("OnLink reported %q, want %q", got, want)
	}
	checkClean(t, e.lg)
}

// storedCancelled checks that the stored message of a parent's cancelled
// turn carries its child's final status: the data-subagent part says
// cancelled and the call ended with an error, not input-available.
func storedCancelled(t *testing.T, e *env, parent string, turn chat.Turn) {
	t.Helper()
	var msg *chat.Message
	for _, m := range settled(t, e, parent) {
		if m.ID == turn.MessageID {
			msg = &m
		}
	}
	if msg == nil {
		t.Fatalf("no stored message %s of %s", turn.MessageID, parent)
	}
	var subs, calls int
	for _, p := range msg.Parts {
		switch p.Type {
		case chat.PartSubagent:
			subs++
			var ref chat.ChildRef
			if err := json.Unmarshal(p.Data, &ref); err != nil || ref.Status != chat.LinkCancelled {
				t.Errorf("stored data-subagent part %s: status %q (%v), want %q", p.Data, ref.Status, err, chat.LinkCancelled)
			}
		case chat.PartTool:
			calls++
			if p.State != chat.ToolOutputError || p.ErrorText == "" {
				t.Errorf("stored call %s: state %q error %q, want %q with the link's error", p.ToolCallID, p.State, p.ErrorText, chat.ToolOutputError)
			}
		}
	}
	if subs != 1 || calls != 1 {
		t.Errorf("stored message has %d data-subagent and %d tool parts, want 1 and 1: %+v", subs, calls, msg.Parts)
	}
}

// TestSubagentCancelDeactivated: a cancel of a parent deactivated while it
// waits (the cancel activates it, its turn is recovered) stops the child
// too and records the link cancelled.
func TestSubagentCancelDeactivated(t *testing.T) {
	e := newEnv(t)
	g := newGate()
	m := newMesh(t, e, func(agent string) llm.Provider {
		if agent == "slow" {
			return g
		}
		return local(agent)
	})
	turn, err := m.get("boss").a.Send(t.Context(), chat.SendRequest{Text: "/agent slow tell me a story"})
	if err != nil {
		t.Fatal(err)
	}
	<-g.streaming
	waitfor.True(t, "the parent waiting", func() bool {
		st, err := m.get("boss").a.Status()
		return err == nil && len(st.Children) == 1
	})
	m.deactivate("boss")
	if ok, err := m.get("boss").a.Cancel(t.Context()); err != nil || !ok {
		t.Fatalf("cancel: %v %v", ok, err)
	}
	if tr := awaitTurn(t, e, "boss"); tr.Status != chat.TurnInterrupted {
		t.Fatalf("parent turn %s", tr.Status)
	}
	if tr := awaitTurn(t, e, "slow"); tr.Status != chat.TurnInterrupted {
		t.Fatalf("child turn %s, want interrupted", tr.Status)
	}
	links, _ := e.store.Links("boss", turn.RequestID)
	if len(links) != 1 || links[0].Status != chat.LinkCancelled {
		t.Fatalf("links %+v", links)
	}
	storedCancelled(t, e, "boss", turn)
	checkClean(t, e.lg)
}

// TestSubagentCancelLinkedUnnamed: a parent that stopped after recording
// a child's link but before naming the child in its stream, then was
// cancelled in recovery, names the child before its stream ends: the
// stored message has the data-subagent part, cancelled (it failed CI once
// when a deactivation fell in that window).
func TestSubagentCancelLinkedUnnamed(t *testing.T) {
	e := newEnv(t)
	g := newGate()
	m := newMesh(t, e, func(agent string) llm.Provider {
		if agent == "slow" {
			return g
		}
		return local(agent)
	})
	m.crash["boss"] = "child-linked"
	turn, err := m.get("boss").a.Send(t.Context(), chat.SendRequest{Text: "/agent slow tell me a story"})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-m.crashed:
	case <-time.After(20 * time.Second):
		t.Fatal("crash point not reached")
	}
	m.deactivate("boss")
	if ok, err := m.get("boss").a.Cancel(t.Context()); err != nil || !ok {
		t.Fatalf("cancel: %v %v", ok, err)
	}
	if tr := awaitTurn(t, e, "boss"); tr.Status != chat.TurnInterrupted {
		t.Fatalf("parent turn %s", tr.Status)
	}
	cs, _ := streamOf(t, e.lg, "boss", turn.StreamID)
	named := 0
	for _, c := range cs {
		if c.Type == chunk.Subagent {
			named++
		}
	}
	if named != 1 {
		t.Errorf("the parent's stream names %d children, want 1", named)
	}
	storedCancelled(t, e, "boss", turn)
	checkClean(t, e.lg)
}

// TestSubagentChildDeleted: a child deleted while its parent waits (its
// turn gone with it, no outcome ever) ends the call with a tool error;
// the parent's turn completes, and verify finds the log clean (the link
// to the deleted turn is a note).
func TestSubagentChildDeleted(t *testing.T) {
	e := newEnv(t)
	g := newGate()
	m := newMesh(t, e, func(agent string) llm.Provider {
		if agent == "slow" {
			return g
		}
		return local(agent)
	})
	m.opt = func(c *chat.Config) { c.ChildPoll = 20 * time.Millisecond }
	if _, err := m.get("boss").a.Send(t.Context(), chat.SendRequest{Text: "/agent slow tell me a story"}); err != nil {
		t.Fatal(err)
	}
	<-g.streaming
	waitfor.True(t, "the parent waiting", func() bool {
		st, err := m.get("boss").a.Status()
		return err == nil && len(st.Children) == 1
	})
	m.deactivate("slow") // as agentd's delete stops it first
	if _, err := e.lg.Delete(t.Context(), "slow"); err != nil {
		t.Fatal(err)
	}
	if tr := awaitTurn(t, e, "boss"); tr.Status != chat.TurnCompleted {
		t.Fatalf("parent turn %s %s", tr.Status, tr.Error)
	}
	msgs := settled(t, e, "boss")
	var errText string
	for _, p := range msgs[len(msgs)-1].Parts {
		if p.Type == chat.PartTool && p.State == chat.ToolOutputError {
			errText = p.ErrorText
		}
	}
	if !strings.Contains(errText, "agent slow was deleted before it answered") {
		t.Errorf("the call's error %q, want the child deleted", errText)
	}
	rep, err := verify.Check(t.Context(), e.lg, verify.Options{})
	if err != nil || !rep.OK() || !slices.ContainsFunc(rep.Notes, func(v verify.Violation) bool { return v.Kind == verify.KindLinkChildDeleted }) {
		t.Fatalf("verify: %v\n%s", err, rep)
	}
}

// TestSubagentRefused: a cycle (an agent calling itself, or an agent that
// called it) and a chain deeper than MaxDepth end the call with a tool
// error the model sees; the turns complete.
func TestSubagentRefused(t *testing.T) {
	e := newEnv(t)
	m := newMesh(t, e, local)
	m.opt = func(c *chat.Config) { c.MaxDepth = 1 }
	cases := []struct {
		agent, prompt string
		errType       string
	}{
		{"self", "/agent self hello", "cycle"},
		// loop-a asks loop-b, whose prompt asks loop-a: refused in loop-b.
		{"loop-a", "/tool agent {\"agent\":\"loop-b\",\"text\":\"/agent loop-a hi\"}", ""},
		// d1 -> d2 -> d3: d3 would be 2 levels deep.
		{"d1", "/tool agent {\"agent\":\"d2\",\"text\":\"/agent d3 hi\"}", ""},
		{"x", "/tool agent {\"agent\":\"bad.id\",\"text\":\"hi\"}", "invalid_input"},
		{"y", "/tool agent {\"agent\":\"z\",\"text\":\"hi\",\"mode\":\"forever\"}", "invalid_input"},
	}
	for _, tc := range cases {
		if _, err := m.get(tc.agent).a.Send(t.Context(), chat.SendRequest{Text: tc.prompt}); err != nil {
			t.Fatal(err)
		}
		if tr := awaitTurn(t, e, tc.agent); tr.Status != chat.TurnCompleted {
			t.Fatalf("%s: turn %s %s", tc.agent, tr.Status, tr.Error)
		}
	}
	failed := func(agent string) string {
		msgs := settled(t, e, agent)
		for _, p := range msgs[len(msgs)-1].Parts {
			if p.Type == chat.PartTool && p.State == chat.ToolOutputError {
				return p.ErrorText
			}
		}
		return ""
	}
	if got := failed("self"); !strings.HasPrefix(got, "cycle: agent self is already in the chain") {
		t.Errorf("self: %q", got)
	}
	if got := failed("loop-b"); !strings.HasPrefix(got, "cycle: agent loop-a is already in the chain of calls (loop-a -> loop-b -> loop-a)") {
		t.Errorf("loop-b: %q", got)
	}
	if got := failed("d2"); !strings.HasPrefix(got, "depth: calling d3 would make it a sub-agent 2 levels deep (d1 -> d2 -> d3), more than the limit of 1") {
		t.Errorf("d2: %q", got)
	}
	if got := failed("x"); !strings.HasPrefix(got, "invalid_input: agent \"bad.id\"") {
		t.Errorf("x: %q", got)
	}
	if got := failed("y"); !strings.HasPrefix(got, "invalid_input: ") {
		t.Errorf("y: %q", got)
	}
	if starts := turnStarts(t, e, "d3"); len(starts) != 0 {
		t.Errorf("d3 ran %v", starts)
	}
	// A child's Send refuses a parent whose chain holds it, however the
	// call reached it, and a parent that does not name its call.
	for _, p := range []*chat.ParentRef{
		{Agent: "q1", RequestID: "rq", CallID: "c1", Mode: chat.ModePersistent, Chain: []string{"self", "q1"}},
		{Agent: "q1", RequestID: "rq", Mode: chat.ModePersistent, Chain: []string{"q1"}},
	} {
		if _, err := m.get("self").a.Send(t.Context(), chat.SendRequest{Text: "hi", Parent: p}); !errors.Is(err, chat.ErrInvalidMessage) {
			t.Errorf("Send with parent %+v: %v, want ErrInvalidMessage", p, err)
		}
	}
	checkClean(t, e.lg)
}

// TestSubagentEphemeral: an ephemeral call runs a new child whose id is
// derived from the call; a persistent one keeps its conversation.
func TestSubagentEphemeral(t *testing.T) {
	e := newEnv(t)
	m := newMesh(t, e, local)
	turn, err := m.get("boss").a.Send(t.Context(), chat.SendRequest{Text: "/tool agent {\"agent\":\"helper\",\"text\":\"hi\",\"mode\":\"ephemeral\"}\n/agent keeper one\n/agent keeper two"})
	if err != nil {
		t.Fatal(err)
	}
	if tr := awaitTurn(t, e, "boss"); tr.Status != chat.TurnCompleted {
		t.Fatalf("turn %s %s", tr.Status, tr.Error)
	}
	outs := childOutputs(t, settled(t, e, "boss")[1])
	if len(outs) != 3 {
		t.Fatalf("outputs %+v", outs)
	}
	if want := chat.EphemeralChildID("helper", "boss", turn.RequestID, outs[0].CallID); outs[0].Agent != want || outs[0].Mode != chat.ModeEphemeral {
		t.Errorf("ephemeral child %+v, want id %s", outs[0], want)
	}
	if !strings.HasPrefix(outs[0].Agent, "helper~boss~") || !eventlog.ValidToken(outs[0].Agent) {
		t.Errorf("ephemeral id %q", outs[0].Agent)
	}
	if msgs := settled(t, e, "keeper"); len(msgs) != 4 {
		t.Errorf("the persistent child has %d messages, want two turns' worth", len(msgs))
	}
	checkClean(t, e.lg)
}

// TestSubagentCrashPoints: the parent dies at each point of a step with
// two children (a child started but its link not recorded, every child
// named and the turn about to wait, a child's end recorded but its output
// not written, the step done) and is activated again. Each time its turn
// completes once with both children's answers, each child's turn started
// once (a start sent again returned the first turn), and verify finds the
// log clean.
func TestSubagentCrashPoints(t *testing.T) {
	for _, point := range []string{"child-started", "children-wait", "tool-recorded", "step-done"} {
		t.Run(point, func(t *testing.T) {
			e := newEnv(t)
			m := newMesh(t, e, local)
			m.crash["boss"] = point
			turn, err := m.get("boss").a.Send(t.Context(), chat.SendRequest{Text: "/agent kid-a hello a\n+/agent kid-b hello b"})
			if err != nil {
				t.Fatal(err)
			}
			select {
			case <-m.crashed:
			case <-time.After(20 * time.Second):
				t.Fatal("crash point not reached")
			}
			m.deactivate("boss")
			m.get("boss")
			if tr := awaitTurn(t, e, "boss"); tr.Status != chat.TurnCompleted {
				t.Fatalf("parent turn %s %s", tr.Status, tr.Error)
			}
			msgs := settled(t, e, "boss")
			if len(msgs) != 2 {
				t.Fatalf("%d messages", len(msgs))
			}
			outs := childOutputs(t, msgs[1])
			if len(outs) != 2 || outs[0].Agent != "kid-a" || outs[1].Agent != "kid-b" {
				t.Fatalf("outputs %+v", outs)
			}
			for _, o := range outs {
				if n := turnStarts(t, e, o.Agent)[o.RequestID]; n != 1 {
					t.Errorf("%s: turn started %d times", o.Agent, n)
				}
			}
			cs, _ := streamOf(t, e.lg, "boss", turn.StreamID)
			outputs := map[string]int{}
			for _, c := range cs {
				if c.Type == chunk.ToolOutput || c.Type == chunk.ToolOutputError {
					outputs[c.ToolCallID]++
				}
			}
			for _, o := range outs {
				if outputs[o.CallID] != 1 {
					t.Errorf("call %s has %d outputs", o.CallID, outputs[o.CallID])
				}
			}
			checkClean(t, e.lg)
		})
	}
}
