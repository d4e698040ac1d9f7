package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/forever-agents/forever/chat"
)

// Sub-agent scenario parameters.
const (
	subFanParents  = 100 // parents of subagent-fanout at -n 1 and above
	subFanChildren = 3   // children per parent, all in one step
)

// subagentCall measures what a sub-agent call costs a chat turn, against a
// plain tool call: turns with one call of the agent tool (an ephemeral
// child, a fresh agent, answering a short text on the local model) and
// turns with one call of the no-op tool alternate with turns that call
// nothing, each on a fresh parent, all on one log, store and batcher, the
// agents reaching each other in process (subPeers, which stands for
// agentd's command path without its NATS hop). A turn is timed from Send
// to the end of its fiber. The call's share is (call turn - 0-tool
// turn), from the medians and the means: it includes, for the sub-agent,
// the child's whole turn (its Send, model call, answer and records), the
// two link events, the data-subagent chunks and the notice. Less a second
// 0-tool turn (the child's own), what remains is the call's machinery.
func subagentCall(ctx context.Context, env *Env) (Result, error) {
	n := max(2, env.Count(30, 150)) // turns per series
	g, err := openToolRig(ctx, env)
	if err != nil {
		return Result{}, err
	}
	defer g.close()
	ps, err := newSubPeers(g)
	if err != nil {
		return Result{}, err
	}
	defer ps.close()
	turn := func(s *series, prompt string) error {
		h, err := ps.host("sc" + strconv.FormatInt(g.seq.Add(1), 10))
		if err != nil {
			return err
		}
		defer ps.drop(h)
		start := time.Now()
		if _, err := h.a.Send(ctx, chat.SendRequest{Text: prompt}); err != nil {
			return err
		}
		h.r.Wait()
		d := time.Since(start)
		s.elapsed += d
		s.ops++
		s.lat = append(s.lat, d)
		return ps.closeChildren()
	}
	prompt := func(call string) func() string {
		return func() string { return fmt.Sprintf("bench turn %d%s", g.seq.Add(1), call) }
	}
	zeroP, toolP := prompt(""), prompt("\n/tool noop {}")
	agentP := prompt("\n/tool agent {\"agent\":\"kid\",\"text\":\"hello there\",\"mode\":\"ephemeral\"}")
	series3 := func(s *series, p func() string, count int) error {
		for range count {
			if err := turn(s, p()); err != nil {
				return err
			}
		}
		return nil
	}
	var w, zero, tool, agent series
	if err := errors.Join(series3(&w, zeroP, toolWarmup), series3(&w, toolP, toolWarmup), series3(&w, agentP, toolWarmup)); err != nil {
		return Result{}, fmt.Errorf("warm up: %w", err)
	}
	g.want.Add(int64(toolWarmup))
	rounds := roundsOf(n, toolChunk)
	err = alternate(rounds,
		func(r int) error { return series3(&zero, zeroP, split(n, rounds, r)) },
		func(r int) error {
			k := split(n, rounds, r)
			g.want.Add(int64(k))
			return series3(&tool, toolP, k)
		},
		func(r int) error { return series3(&agent, agentP, split(n, rounds, r)) },
	)
	if err = errors.Join(err, g.check(ctx), ps.check()); err != nil {
		return Result{}, err
	}
	mean := func(s *series) time.Duration { return s.elapsed / time.Duration(max(1, s.ops)) }
	p50 := func(s *series) time.Duration { return percentile(s.lat, 50) }
	return Result{Rows: []Row{
		{Figure: "sub-agent call us, (1-agent-call turn - 0-tool turn), p50", Value: micros(p50(&agent) - p50(&zero)),
			Baseline: "tool call us, (1-tool turn - 0-tool turn), p50", BaselineValue: micros(p50(&tool) - p50(&zero)), LowerIsBetter: true},
		{Figure: "sub-agent call us, (1-agent-call turn - 0-tool turn), mean", Value: micros(mean(&agent) - mean(&zero)),
			Baseline: "tool call us, (1-tool turn - 0-tool turn), mean", BaselineValue: micros(mean(&tool) - mean(&zero)), LowerIsBetter: true},
		{Figure: "1-agent-call turn p50 us", Value: micros(p50(&agent)),
			Baseline: "1-tool turn p50 us", BaselineValue: micros(p50(&tool)), LowerIsBetter: true},
		{Figure: "sub-agent call us without the child's own turn, (1-agent-call turn - two 0-tool turns), p50", Value: micros(p50(&agent) - 2*p50(&zero)),
			Baseline: "tool call us, (1-tool turn - 0-tool turn), p50", BaselineValue: micros(p50(&tool) - p50(&zero)), LowerIsBetter: true},
	}}, nil
}

// subagentFanout runs subFanParents parents at once, each calling
// subFanChildren ephemeral children in one step (so 4 turns per parent,
// all of them at once), and counts turns per second until every parent
// completed; beside as many independent 0-tool turns (4 per parent, on
// as many fresh agents), all at once. It also gives the parents' turn
// latency against the independent turns'. Run it with -sync always, the
// mode agentd defaults to. Below -n 1 the parents are fewer (at least 4).
func subagentFanout(ctx context.Context, env *Env) (Result, error) {
	parents := min(subFanParents, max(4, env.Count(subFanParents, subFanParents)))
	rounds := max(2, env.Count(4, 4))
	g, err := openToolRig(ctx, env)
	if err != nil {
		return Result{}, err
	}
	defer g.close()
	ps, err := newSubPeers(g)
	if err != nil {
		return Result{}, err
	}
	defer ps.close()
	var b strings.Builder
	for i := range subFanChildren {
		if i > 0 {
			b.WriteString("\n+")
		} else {
			b.WriteString("\n")
		}
		b.WriteString(`/tool agent {"agent":"kid","text":"hello there","mode":"ephemeral"}`)
	}
	calls := b.String()
	// all runs k turns at once, each on a fresh agent with the prompt, and
	// returns their latencies.
	all := func(s *series, k int, prompt string) error {
		hosts := make([]*subHost, k)
		for i := range hosts {
			h, err := ps.host("sf" + strconv.FormatInt(g.seq.Add(1), 10))
			if err != nil {
				return err
			}
			hosts[i] = h
		}
		defer func() {
			for _, h := range hosts {
				ps.drop(h)
			}
		}()
		lat := make([]time.Duration, k)
		start := time.Now()
		eg, _ := errgroup.WithContext(ctx)
		for i, h := range hosts {
			eg.Go(func() error {
				t := time.Now()
				if _, err := h.a.Send(ctx, chat.SendRequest{Text: fmt.Sprintf("bench turn %d%s", g.seq.Add(1), prompt)}); err != nil {
					return err
				}
				h.r.Wait()
				lat[i] = time.Since(t)
				return nil
			})
		}
		err := eg.Wait()
		s.elapsed += time.Since(start)
		s.lat = append(s.lat, lat...)
		return errors.Join(err, ps.closeChildren())
	}
	turnsPer := 1 + subFanChildren
	var w, fan, plain series
	if err := errors.Join(all(&w, 4, calls), all(&w, 4*turnsPer, "")); err != nil {
		return Result{}, fmt.Errorf("warm up: %w", err)
	}
	err = alternate(rounds,
		func(int) error {
			plain.ops += parents * turnsPer
			return all(&plain, parents*turnsPer, "")
		},
		func(int) error {
			fan.ops += parents * turnsPer
			return all(&fan, parents, calls)
		},
	)
	if err = errors.Join(err, g.check(ctx), ps.check()); err != nil {
		return Result{}, err
	}
	fig := fmt.Sprintf("%d parents x %d children", parents, subFanChildren)
	return Result{Rows: []Row{
		{Figure: "turns/s, " + fig, Value: fan.rate(),
			Baseline: fmt.Sprintf("turns/s, %d independent 0-tool turns at once", parents*turnsPer), BaselineValue: plain.rate()},
		{Figure: "parent turn p50 ms, " + fig, Value: micros(percentile(fan.lat, 50)) / 1000,
			Baseline: "independent turn p50 ms", BaselineValue: micros(percentile(plain.lat, 50)) / 1000, LowerIsBetter: true},
		{Figure: "parent turn p99 ms, " + fig, Value: micros(percentile(fan.lat, 99)) / 1000,
			Baseline: "independent turn p99 ms", BaselineValue: micros(percentile(plain.lat, 99)) / 1000, LowerIsBetter: true},
	}}, nil
}

// subPeers hosts the rig's agents for sub-agent calls: chat.Peers in
// process, as agentd's command path is across nodes (without its NATS
// hop). A child is a fresh host made on its first call.
type subPeers struct {
	g     *toolRig
	tools *chat.Tools

	mu       sync.Mutex
	hosts    map[string]*subHost
	children []*subHost
	calls    int // child turns started
	answered int // outputs of completed children
	errs     []error
}

// subHost is one agent of the rig with sub-agents: its Runner and Agent.
type subHost struct {
	toolHost
	id string
}

func newSubPeers(g *toolRig) (*subPeers, error) {
	noop, _ := g.tools.Lookup("noop")
	agent, err := chat.AgentTool()
	if err != nil {
		return nil, err
	}
	tools, err := chat.NewTools(noop, agent)
	if err != nil {
		return nil, err
	}
	return &subPeers{g: g, tools: tools, hosts: map[string]*subHost{}}, nil
}

// host makes the agent's host, a parent or a child.
func (ps *subPeers) host(agent string) (*subHost, error) {
	r, err := ps.g.runner(agent)
	if err != nil {
		return nil, err
	}
	p := newStepTimer()
	a, err := chat.New(chat.Config{Agent: agent, Log: ps.g.lg, Store: ps.g.store, Batcher: ps.g.batcher,
		MaxPayload: ps.g.lg.MaxPayload(), Fibers: r, Provider: p, Tools: ps.tools, Peers: ps, Logger: ps.g.env.Logger,
		ChunkBatchesWritable: packChunks, EndRecordsWritable: endRecords, AnnouncedStepsWritable: announcedSteps,
		InlineEndsWritable: inlineEnds})
	if err != nil {
		r.Close()
		return nil, err
	}
	ps.g.mu.Lock()
	ps.g.agents = append(ps.g.agents, agent)
	ps.g.mu.Unlock()
	h := &subHost{toolHost: toolHost{r: r, a: a, p: p}, id: agent}
	ps.mu.Lock()
	ps.hosts[agent] = h
	ps.mu.Unlock()
	return h, nil
}

func (ps *subPeers) get(agent string) (*subHost, bool) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	h, ok := ps.hosts[agent]
	return h, ok
}

// drop closes a host and forgets it.
func (ps *subPeers) drop(h *subHost) {
	ps.mu.Lock()
	delete(ps.hosts, h.id)
	ps.mu.Unlock()
	h.close()
}

// closeChildren waits for every child made so far to finish (its notice
// sent) and closes it.
func (ps *subPeers) closeChildren() error {
	ps.mu.Lock()
	kids := ps.children
	ps.children = nil
	ps.mu.Unlock()
	for _, h := range kids {
		h.r.Wait()
		ps.drop(h)
	}
	return nil
}

func (ps *subPeers) close() {
	ps.closeChildren()
	ps.mu.Lock()
	hs := make([]*subHost, 0, len(ps.hosts))
	for _, h := range ps.hosts {
		hs = append(hs, h)
	}
	ps.mu.Unlock()
	for _, h := range hs {
		ps.drop(h)
	}
}

// check returns an error unless every child's answer reached its parent.
func (ps *subPeers) check() error {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	return errors.Join(ps.errs...)
}

// StartChild sends the child its turn, making the child on its first
// call.
func (ps *subPeers) StartChild(ctx context.Context, child string, req chat.ChildRequest) (chat.Turn, error) {
	h, ok := ps.get(child)
	if !ok {
		var err error
		if h, err = ps.host(child); err != nil {
			return chat.Turn{}, err
		}
		ps.mu.Lock()
		ps.children = append(ps.children, h)
		ps.calls++
		ps.mu.Unlock()
	}
	return h.a.Send(ctx, chat.SendRequest{Text: req.Text, RequestID: req.RequestID, Parent: &req.Parent})
}

// CancelChild cancels the child's turn.
func (ps *subPeers) CancelChild(ctx context.Context, child, requestID string) error {
	if h, ok := ps.get(child); ok {
		_, err := h.a.CancelTurn(ctx, requestID)
		return err
	}
	return nil
}

// NotifyParent wakes the parent's waiting turn.
func (ps *subPeers) NotifyParent(ctx context.Context, parent string, n chat.ChildNotice) error {
	h, ok := ps.get(parent)
	if !ok {
		err := fmt.Errorf("bench: the parent %s of %s is gone", parent, n.Child)
		ps.mu.Lock()
		ps.errs = append(ps.errs, err)
		ps.mu.Unlock()
		return fmt.Errorf("%w: %w", chat.ErrChildRefused, err)
	}
	return h.a.ChildEnded(ctx, n)
}

var _ chat.Peers = (*subPeers)(nil)
