package chat

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/forever-agents/forever/chat/chunk"
	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/fiber"
	"github.com/forever-agents/forever/internal/backoff"
)

// How long a sub-agent call keeps trying to start its child while the
// child's owner cannot be reached, and how long a child keeps trying to
// tell its parent that its turn ended before leaving that to a recovery.
const (
	childStartFor = 2 * time.Minute
	notifyFor     = time.Minute
	cancelFor     = 15 * time.Second
)

// children is the role of an Agent that calls other agents from its
// turns (sub-agents, agent tools): it starts a child's turn and records
// the link, waits for the child's end (its notice, ChildEnded, or a poll),
// and, for a turn that is itself a child, tells its parent that it ended.
// The Agent embeds it: its methods are the Agent's. The calls of a running
// turn are that run's (turnRun.awaitChildren, runChild, endChildren).
type children struct {
	a *Agent

	mu struct {
		sync.Mutex
		// waiters wake the turn waiting for a child turn, by the child's
		// request id (childWaiter).
		waiters map[string]chan struct{}
	}
}

// childJob is one sub-agent call of a step, run by runChild. The fields
// before started are set before started closes, the others before done
// closes.
type childJob struct {
	call Part
	tool *Tool

	started  chan struct{}
	ref      ChildRef // RequestID "" when the call ended without a child turn
	startErr error    // the turn cannot go on (ctx ended, the log failed)

	done chan struct{}
	end  ChildRef   // the link as it ended
	res  toolResult // what the model is shown
	err  error      // the turn cannot go on
}

func newChildJob(call Part, t *Tool) *childJob {
	return &childJob{call: call, tool: t, started: make(chan struct{}), done: make(chan struct{})}
}

// chain is the chain of callers of st's turn's children: its own callers'
// and its agent.
func (cs *children) chain(info TurnInfo) []string {
	a := cs.a
	var chain []string
	if info.Parent != nil {
		chain = slices.Clone(info.Parent.Chain)
	}
	return append(chain, a.agent)
}

// awaitChildren runs a step's sub-agent calls until each has its result:
// it starts every child at once (runChild), names each in the stream as a
// data-subagent part in call order once its turn is started, waits for the
// step's other tools (toolsDone), and then, while children still run,
// waits idle: the fiber holds no keepalive reference and the turn no
// TurnLimiter admission, so the agent can be deactivated (which interrupts
// the turn; recovery resumes it and finds the links in the turns view).
// It returns an error only when the turn cannot go on: ctx ended (a
// cancel, shutdown, deactivation) or the log failed.
func (st *turnRun) awaitChildren(ctx, fctx context.Context, jobs []*childJob, toolsDone func()) error {
	a, f, em := st.a, st.f, st.emitter()
	chain := a.chain(st.info)
	ctx, stop := context.WithCancelCause(ctx)
	var wg sync.WaitGroup
	defer func() {
		stop(errWrite)
		wg.Wait()
	}()
	for _, j := range jobs {
		wg.Go(func() { st.runChild(ctx, chain, j) })
	}
	for _, j := range jobs {
		select {
		case <-j.started:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
		if j.startErr != nil {
			return j.startErr
		}
		if j.ref.RequestID == "" {
			continue
		}
		if err := a.crashPoint(fctx, pointChildLinked); err != nil {
			return err
		}
		if err := st.nameChild(fctx, j.call.ToolCallID, j.ref); err != nil {
			return err
		}
	}
	toolsDone()
	waiting := false
	for _, j := range jobs {
		select {
		case <-j.done:
		default:
			waiting = true
		}
	}
	if waiting {
		// What clients saw is durable before the agent may go.
		if _, err := em.w.Flush(fctx); err != nil {
			return fmt.Errorf("%w: %w", errWrite, err)
		}
		if err := a.crashPoint(fctx, pointChildrenWait); err != nil {
			return err
		}
		busy := f.Idle()
		a.idleTurn(st.at)
		defer func() {
			a.busyTurn(st.at)
			busy()
		}()
	}
	for _, j := range jobs {
		select {
		case <-j.done:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
		if j.err != nil {
			return j.err
		}
	}
	return nil
}

// nameChild writes the data-subagent part of call callID with ref, unless
// the stream shows it already.
func (st *turnRun) nameChild(ctx context.Context, callID string, ref ChildRef) error {
	em := st.emitter()
	if p, ok := em.b.dataPart(PartSubagent, callID); ok {
		var cur ChildRef
		if json.Unmarshal(p.Data, &cur) == nil && cur.Status == ref.Status && cur.RequestID == ref.RequestID {
			return nil
		}
	}
	data, err := json.Marshal(ref)
	if err != nil {
		return err
	}
	if err := em.emit(ctx, chunk.Chunk{Type: PartSubagent, ID: callID, Data: data}); err != nil {
		return fmt.Errorf("%w: %w", errWrite, err)
	}
	return nil
}

// nameLinked names, before a turn's terminal chunk, every child the turn
// linked that its stream does not name yet: a turn stopped between a
// link's record and its data-subagent part (deactivated, crashed, then
// cancelled or failed in recovery) would otherwise end with a call whose
// child its stream and stored message never name. A link the view cannot
// read is logged and left: the turn still ends.
func (st *turnRun) nameLinked(ctx context.Context) error {
	a, em := st.a, st.emitter()
	links, err := a.store.Links(a.agent, st.info.RequestID)
	if err != nil {
		a.logger.Warn("read the turn's sub-agent links", "request", st.info.RequestID, "err", err)
		return nil
	}
	for _, l := range links {
		if _, ok := em.b.dataPart(PartSubagent, l.CallID); ok || l.RequestID == "" {
			continue
		}
		if err := st.nameChild(ctx, l.CallID, l.ChildRef); err != nil {
			return err
		}
	}
	return nil
}

// endChildCall writes the end of a sub-agent call: the data-subagent part
// with the link's final status, then the call's output.
func (st *turnRun) endChildCall(ctx context.Context, j *childJob) error {
	a, em := st.a, st.emitter()
	if j.end.RequestID != "" {
		if err := st.nameChild(ctx, j.call.ToolCallID, j.end); err != nil {
			return err
		}
	}
	if err := a.crashPoint(ctx, pointToolRecorded); err != nil {
		return err
	}
	if err := em.emit(ctx, outputChunk(j.call.ToolCallID, j.res)); err != nil {
		return fmt.Errorf("%w: %w", errWrite, err)
	}
	return nil
}

// runChild runs one sub-agent call: starts the child's turn (unless the
// turns view holds the call's link: a resumed turn), records the link,
// waits for the child's turn to end and records that.
func (st *turnRun) runChild(ctx context.Context, chain []string, j *childJob) {
	a := st.a
	var once sync.Once
	started := func() { once.Do(func() { close(j.started) }) }
	defer close(j.done)
	defer started()
	link, ok, err := a.store.Link(a.agent, st.info.RequestID, j.call.ToolCallID)
	if err != nil {
		j.startErr, j.err = err, err
		return
	}
	if !ok {
		var l *ChildLink
		l, j.res, err = st.startChild(ctx, chain, j)
		if err != nil || l == nil {
			j.startErr, j.err = err, err
			return
		}
		link = *l
	}
	j.ref = link.ChildRef
	started()
	if !link.Ended() {
		if link, err = a.awaitChild(ctx, link); err != nil {
			j.err = err
			return
		}
	}
	j.end, j.res = link.ChildRef, link.result()
}

// result is what the model is shown for an ended link.
func (l ChildLink) result() toolResult {
	if l.Status == LinkCompleted && len(l.Output) > 0 {
		return toolResult{Output: l.Output}
	}
	return toolResult{Error: cmp.Or(l.Error, "the sub-agent ended without an answer"), ErrorType: "subagent_" + l.Status}
}

// startChild names the call's child, checks the chain of callers, starts
// the child's turn and records the link (subagent.started). A call that
// cannot run (bad input, a cycle, too deep, refused by the child) returns
// no link and its tool error.
func (st *turnRun) startChild(ctx context.Context, chain []string, j *childJob) (*ChildLink, toolResult, error) {
	a := st.a
	req, callID := st.info.RequestID, j.call.ToolCallID
	c, terr := j.tool.sub.resolve(j.call.Input)
	if terr == nil {
		terr = c.childID(j.call.ToolName, a.agent, req, callID)
	}
	if terr == nil {
		terr = checkChain(chain, c.child, a.cfg.MaxDepth)
	}
	if terr == nil && a.cfg.Peers == nil {
		terr = &ToolError{Type: "unavailable", Message: "sub-agents are not available here: the agent has no way to reach other agents"}
	}
	if terr != nil {
		a.metrics.subagentCalls.WithLabelValues("refused").Inc()
		return nil, toolResult{Error: terr.Error(), ErrorType: terr.Type}, nil
	}
	childReq := ChildRequestID(a.agent, req, callID)
	turn, err := a.sendChild(ctx, c.child, ChildRequest{RequestID: childReq, Text: c.text,
		Parent: ParentRef{Agent: a.agent, RequestID: req, CallID: callID, Mode: c.mode, Chain: chain}})
	if err != nil {
		if ctx.Err() != nil {
			return nil, toolResult{}, context.Cause(ctx)
		}
		a.metrics.subagentCalls.WithLabelValues("refused").Inc()
		a.logger.Warn("sub-agent call refused", "request", req, "call", callID, "child", c.child, "err", err)
		return nil, toolResult{Error: fmt.Sprintf("agent %s did not take the call: %v", c.child, err), ErrorType: "refused"}, nil
	}
	if err := a.crashPoint(ctx, pointChildStarted); err != nil {
		return nil, toolResult{}, err
	}
	link := ChildLink{
		ChildRef: ChildRef{Agent: c.child, Type: c.typ, Mode: c.mode, CallID: callID, RequestID: childReq,
			StreamID: turn.StreamID, MessageID: turn.MessageID, Status: LinkRunning},
		ParentRequestID: req, StartedAt: a.cfg.Clock.Now().UTC(),
	}
	if err := a.appendLink(ctx, EventSubagentStarted, link); err != nil {
		return nil, toolResult{}, err
	}
	a.metrics.subagentCalls.WithLabelValues("started").Inc()
	return &link, toolResult{}, nil
}

// sendChild starts the child's turn through Config.Peers, trying again
// (with the same request id, so at most one turn runs) while the child's
// owner cannot be reached, for up to childStartFor. ErrChildRefused, or
// the last error after that, is the caller's to show the model.
func (cs *children) sendChild(ctx context.Context, child string, req ChildRequest) (Turn, error) {
	a := cs.a
	deadline := a.cfg.Clock.Now().Add(childStartFor)
	for n := 0; ; n++ {
		turn, err := a.cfg.Peers.StartChild(ctx, child, req)
		if err == nil || errors.Is(err, ErrChildRefused) || ctx.Err() != nil || a.cfg.Clock.Now().After(deadline) {
			return turn, err
		}
		wait := backoff.Exp(100*time.Millisecond, 5*time.Second, n)
		a.logger.Warn("sub-agent start failed; trying again", "child", child, "request", req.RequestID, "err", err, "in", wait)
		select {
		case <-a.cfg.Clock.After(wait):
		case <-ctx.Done():
			return Turn{}, context.Cause(ctx)
		}
	}
}

// appendLink appends a link event with an id derived from the call and
// the event type, so a retried append is stored once (within JetStream's
// duplicate window; the turns view keeps the first one anyway), and
// reports it to Config.OnLink.
func (cs *children) appendLink(ctx context.Context, typ string, l ChildLink) error {
	a := cs.a
	e, err := a.event(typ, l)
	if err != nil {
		return err
	}
	h := sha256.Sum256([]byte(a.agent + "\x00" + typ + "\x00" + l.ParentRequestID + "\x00" + l.CallID))
	e.ID = "link-" + hex.EncodeToString(h[:16])
	seq, err := a.log.Append(ctx, e)
	if errors.Is(err, eventlog.ErrDuplicate) {
		err = nil
	}
	if err != nil {
		return fmt.Errorf("chat: append %s: %w", typ, err)
	}
	if err := a.store.WaitFor(ctx, seq); err != nil {
		return err
	}
	if a.cfg.OnLink != nil {
		a.cfg.OnLink(ctx, typ, l)
	}
	return nil
}

// awaitChild waits until the child's turn of link has ended, then records
// the link's end (subagent.ended) and returns it. It wakes on the child's
// notice (ChildEnded) and reads the child's state every Config.ChildPoll,
// so a lost notice costs a poll, never the answer. A read of the child's
// owner that failed but may pass later (a 503 while its partition moves,
// a timeout) is tried again, sooner than a poll at first: it is no answer
// about the child, and failing the turn on it would fail a call whose
// child answers.
func (cs *children) awaitChild(ctx context.Context, link ChildLink) (ChildLink, error) {
	a := cs.a
	failed := 0
	for {
		wake, unregister := a.childWaiter(link.RequestID)
		end, ended, err := a.childEnd(ctx, link)
		if err == nil && ended {
			unregister()
			if err := a.appendLink(ctx, EventSubagentEnded, end); err != nil {
				return link, err
			}
			a.metrics.subagentCalls.WithLabelValues(end.Status).Inc()
			return end, nil
		}
		poll := a.cfg.ChildPoll
		switch {
		case err == nil:
			failed = 0
		case errors.Is(err, errChildUnreachable) && ctx.Err() == nil:
			poll = min(poll, backoff.Exp(100*time.Millisecond, 5*time.Second, failed))
			failed++
			a.logger.Warn("reading a sub-agent's turn on its owner failed; trying again", "child", link.Agent, "request", link.RequestID, "err", err, "in", poll)
		default:
			unregister()
			return link, err
		}
		select {
		case <-wake:
		case <-a.cfg.Clock.After(poll):
		case <-ctx.Done():
			unregister()
			return link, context.Cause(ctx)
		}
		unregister()
	}
}

// childEnd reads the child's turn of link, caught up with the child's last
// event, and reports whether it ended; if so it returns the link ended
// accordingly: its output (the child's final text) or error, and the child
// turn's usage. The turn is read from this node's views, or, when Peers
// reads children elsewhere (ChildTurnReader: a node whose views hold only
// the partitions it owns), on the child's owner.
func (cs *children) childEnd(ctx context.Context, link ChildLink) (ChildLink, bool, error) {
	a := cs.a
	var out TurnOutcome
	var err error
	r, remote := a.cfg.Peers.(ChildTurnReader)
	if remote {
		out, remote, err = r.ChildTurn(ctx, link.Agent, link.RequestID)
		if err != nil && !errors.Is(err, ErrChildRefused) {
			err = fmt.Errorf("%w: %w", errChildUnreachable, err)
		}
	}
	if !remote && err == nil {
		out, err = cs.turnOutcome(ctx, link.Agent, link.RequestID)
	}
	if err != nil || (out.Found && out.Active) {
		return link, false, err
	}
	end := link
	end.EndedAt = a.cfg.Clock.Now().UTC()
	if !out.Found {
		// The link is recorded once the child's turn.started is durable,
		// and the views are caught up with the child's last event: a turn
		// not found is one whose agent was deleted, and it will never end.
		end.Status, end.Error = LinkFailed, fmt.Sprintf("agent %s was deleted before it answered", link.Agent)
		return end, true, nil
	}
	switch out.Status {
	case TurnCompleted:
		end.Status = LinkCompleted
		end.Output, err = childOutput(end.ChildRef, out.Text, DefaultMaxToolOutput)
		if err != nil {
			return link, false, err
		}
	case TurnFailed:
		end.Status, end.Error = LinkFailed, fmt.Sprintf("agent %s failed: %s", link.Agent, out.Error)
	default:
		end.Status, end.Error = LinkInterrupted, fmt.Sprintf("agent %s was interrupted (%s) before it answered", link.Agent, cmp.Or(out.Reason, "cancelled"))
	}
	end.Usage = out.Usage
	return end, true, nil
}

// errChildUnreachable marks a failed read of a child's turn on its owner
// (ChildTurnReader) that may pass on a later try: awaitChild tries again.
var errChildUnreachable = errors.New("chat: the sub-agent's owner did not answer")

// TurnOutcome is what a parent reads of a child's turn (ChildTurn,
// Agent.TurnOutcome): whether the views hold it, whether it still runs,
// and how it ended.
type TurnOutcome struct {
	// Found is false for a turn the views, caught up with the agent's last
	// event, do not hold: its agent was deleted.
	Found  bool   `json:"found"`
	Active bool   `json:"active,omitempty"`
	Status string `json:"status,omitempty"` // TurnCompleted, TurnFailed, ...
	Error  string `json:"error,omitempty"`
	Reason string `json:"reason,omitempty"`
	// Text is the final text of a completed turn's answer.
	Text string `json:"text,omitempty"`
	// Usage is the turn's usage with its own children's, once recorded.
	Usage *SubagentUsage `json:"usage,omitempty"`
}

// ChildTurnReader is implemented by a Peers whose node's views may not
// hold a child's rows (agentd with owned views: each node projects the
// partitions it owns). ChildTurn reads the child's turn requestID where
// they are (the child's owner, which answers with its Agent.TurnOutcome);
// ok false means this node's views hold them, and the caller reads them
// here.
type ChildTurnReader interface {
	ChildTurn(ctx context.Context, child, requestID string) (out TurnOutcome, ok bool, err error)
}

// TurnOutcome reads the agent's turn requestID from this node's views,
// caught up with the agent's last event: what its parent's ChildTurn asks
// of the agent's owner.
func (a *Agent) TurnOutcome(ctx context.Context, requestID string) (TurnOutcome, error) {
	return a.turnOutcome(ctx, a.agent, requestID)
}

// turnOutcome reads agent's turn requestID from this node's views, caught
// up with the agent's last event.
func (cs *children) turnOutcome(ctx context.Context, agent, requestID string) (TurnOutcome, error) {
	a := cs.a
	caughtUp := func() error {
		return retryRead(ctx, a.logger, "child turn", func() error {
			last, err := a.log.LastSeq(ctx, eventlog.Filter{Agent: agent})
			if err != nil {
				return err
			}
			return a.store.WaitFor(ctx, last)
		})
	}
	if err := caughtUp(); err != nil {
		return TurnOutcome{}, err
	}
	info, err := a.store.Turn(agent, requestID)
	if err == nil && !info.Active() {
		// Each view follows the log at its own pace: the turns view may
		// show an outcome stored after the sequence waited for above,
		// while the messages and usage views have not reached the
		// child's answer and usage stored just before it. Wait again for
		// the child's log as it is now, which holds the outcome.
		if err := caughtUp(); err != nil {
			return TurnOutcome{}, err
		}
	}
	if errors.Is(err, ErrNotFound) {
		return TurnOutcome{}, nil
	}
	if err != nil {
		return TurnOutcome{}, err
	}
	out := TurnOutcome{Found: true, Active: info.Active(), Status: info.Status, Error: info.Error, Reason: info.Reason}
	if out.Active {
		return out, nil
	}
	if info.Status == TurnCompleted {
		m, err := a.store.Message(agent, info.AssistantMessageID)
		if err != nil && !errors.Is(err, ErrNotFound) {
			return TurnOutcome{}, err
		}
		out.Text = m.Text()
	}
	if tu, ok, err := a.store.TurnUsage(agent, requestID); err != nil {
		return TurnOutcome{}, err
	} else if ok {
		out.Usage = &SubagentUsage{Input: tu.Input + tu.Subagents.Input, Output: tu.Output + tu.Subagents.Output, Calls: 1 + tu.Subagents.Calls,
			Cost: tu.Cost + tu.Subagents.Cost}
	}
	return out, nil
}

// childOutput is the output of a call whose child answered text, cut to
// fit limit bytes.
func childOutput(ref ChildRef, text string, limit int) (json.RawMessage, error) {
	out := ChildOutput{ChildRef: ref, Text: text}
	b, err := json.Marshal(out)
	for err == nil && len(b) > limit && out.Text != "" {
		// JSON escapes may make a byte six: cut by the excess, and more.
		cut := max(len(out.Text)-(len(b)-limit)-64, 0)
		for cut > 0 && !utf8RuneStart(out.Text[cut]) {
			cut--
		}
		out.Text, out.Truncated = out.Text[:cut], true
		b, err = json.Marshal(out)
	}
	return b, err
}

func utf8RuneStart(b byte) bool { return b&0xC0 != 0x80 }

// childWaiter registers a wake-up for the child turn requestID: a notice
// of its end (ChildEnded) sends on the channel. The caller unregisters.
func (cs *children) childWaiter(requestID string) (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	cs.mu.Lock()
	if cs.mu.waiters == nil {
		cs.mu.waiters = map[string]chan struct{}{}
	}
	cs.mu.waiters[requestID] = ch
	cs.mu.Unlock()
	return ch, func() {
		cs.mu.Lock()
		if cs.mu.waiters[requestID] == ch {
			delete(cs.mu.waiters, requestID)
		}
		cs.mu.Unlock()
	}
}

// ChildEnded takes a child's notice that its turn ended (the child-result
// command): a turn of this process waiting for that child reads its
// outcome now. A notice for a turn not running here is no error: the host
// activating the agent for the command has it recover its turns, which
// read the outcome; a notice for a call that ended already changes
// nothing. The outcome itself is read from the log, never from n.
func (cs *children) ChildEnded(_ context.Context, n ChildNotice) error {
	if n.RequestID == "" {
		return fmt.Errorf("%w: child-result: requestId is required", ErrInvalidMessage)
	}
	cs.mu.Lock()
	ch := cs.mu.waiters[n.RequestID]
	cs.mu.Unlock()
	if ch != nil {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
	return nil
}

// idleTurn gives back at's TurnLimiter admission while its turn waits for
// its children, running nothing; busyTurn takes it back, past the bound
// if need be (the turn was admitted).
func (cs *children) idleTurn(at *activeTurn) {
	a := cs.a
	a.mu.Lock()
	admitted := at.admitted
	at.admitted = false
	a.mu.Unlock()
	if admitted {
		a.cfg.Turns.release()
	}
}

func (cs *children) busyTurn(at *activeTurn) {
	a := cs.a
	_ = a.cfg.Turns.acquire(true)
	a.mu.Lock()
	at.admitted = true
	a.mu.Unlock()
}

// endChildren ends the links of turn requestID that still run, as the turn
// ends without their answers (cancelled, interrupted, failed): each child
// is told to stop its turn (best effort: a child that cannot be reached
// runs on, and its notice is then ignored) and the link is recorded
// cancelled, so every started link ends. The turn's message (st.b) then
// shows every ended link as it ended (showEnded), so the message stored
// next carries each child's final status.
func (st *turnRun) endChildren(ctx context.Context) error {
	a := st.a
	requestID := st.info.RequestID
	links, err := a.store.Links(a.agent, requestID)
	if err != nil {
		return err
	}
	defer func() { showEnded(st.b, links) }()
	for i := range links {
		l := &links[i]
		if l.Ended() {
			continue
		}
		if a.cfg.Peers != nil {
			cctx, cancel := context.WithTimeout(ctx, cancelFor)
			if err := a.cfg.Peers.CancelChild(cctx, l.Agent, l.RequestID); err != nil {
				a.logger.Warn("cancel sub-agent", "request", requestID, "child", l.Agent, "childRequest", l.RequestID, "err", err)
			}
			cancel()
		}
		l.Status, l.EndedAt = LinkCancelled, a.cfg.Clock.Now().UTC()
		l.Error = fmt.Sprintf("agent %s was cancelled: the calling turn ended before it answered", l.Agent)
		if err := a.appendLink(ctx, EventSubagentEnded, *l); err != nil {
			return err
		}
		a.metrics.subagentCalls.WithLabelValues(LinkCancelled).Inc()
	}
	return nil
}

// showEnded brings a turn's parts up to date with its ended links, after
// its stream ended: each link's data-subagent part carries the link's
// final status, and a call still waiting on its child shows the link's
// error (output-error). It changes the parts only, not the stream, whose
// terminal chunk is written.
func showEnded(b *builder, links []ChildLink) {
	for _, l := range links {
		if !l.Ended() {
			continue
		}
		if i, ok := b.index["data:"+PartSubagent+"\x00"+l.CallID]; ok {
			var cur ChildRef
			if json.Unmarshal(b.parts[i].Data, &cur) == nil && cur.Status != l.Status {
				if data, err := json.Marshal(l.ChildRef); err == nil {
					b.parts[i].Data = data
				}
			}
		}
		if i, ok := b.index["tool:"+l.CallID]; ok {
			if st := b.parts[i].State; st == ToolInputStreaming || st == ToolInputAvailable {
				r := l.result()
				if r.Error != "" {
					b.parts[i].State, b.parts[i].ErrorText = ToolOutputError, r.Error
				} else {
					b.parts[i].State, b.parts[i].Output = ToolOutput, r.Output
				}
			}
		}
	}
}

// subagentUsage sums the usage of turn requestID's ended links.
func (cs *children) subagentUsage(requestID string) (*SubagentUsage, error) {
	a := cs.a
	links, err := a.store.Links(a.agent, requestID)
	if err != nil || len(links) == 0 {
		return nil, err
	}
	var u SubagentUsage
	for _, l := range links {
		if l.Usage != nil {
			u.add(*l.Usage)
		}
	}
	if u == (SubagentUsage{}) {
		return nil, nil
	}
	return &u, nil
}

// awaitingChildren reports whether st's turn waits for a child: a link of
// it still runs. Such a turn is resumed by recovery without counting an
// attempt or asking OnChatRecovery: its wait is by design.
func (cs *children) awaitingChildren(requestID string) bool {
	a := cs.a
	links, err := a.store.Links(a.agent, requestID)
	if err != nil {
		return false
	}
	for _, l := range links {
		if !l.Ended() {
			return true
		}
	}
	return false
}

// notifyParent tells the parent of a sub-agent's turn that ended, trying
// for up to notifyFor. A parent that refuses (no such agent any more) is
// not told; one that cannot be reached leaves the error, which keeps the
// turn's fiber for recovery, which tells it again.
func (cs *children) notifyParent(ctx context.Context, info TurnInfo) error {
	a := cs.a
	p := info.Parent
	n := ChildNotice{Child: a.agent, RequestID: info.RequestID, ParentRequestID: p.RequestID, CallID: p.CallID}
	deadline := a.cfg.Clock.Now().Add(notifyFor)
	for try := 0; ; try++ {
		err := a.cfg.Peers.NotifyParent(ctx, p.Agent, n)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, ErrChildRefused):
			a.logger.Warn("the parent refused the notice of a sub-agent turn's end", "parent", p.Agent, "request", info.RequestID, "err", err)
			return nil
		case ctx.Err() != nil:
			return ctx.Err()
		case a.cfg.Clock.Now().After(deadline):
			// As a log failure: the fiber stays, and its recovery (the
			// turn has ended) tells the parent again.
			return fmt.Errorf("%w: tell parent %s that turn %s ended: %w", eventlog.ErrUnconfirmed, p.Agent, info.RequestID, err)
		}
		wait := backoff.Exp(100*time.Millisecond, 5*time.Second, try)
		select {
		case <-a.cfg.Clock.After(wait):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// afterTurn runs when a turn fiber's work is done, err its outcome: a
// sub-agent's turn that ended tells its parent. During shutdown, after a
// log failure or the loss of the agent, nothing is told: the fiber stays
// and its recovery tells.
func (cs *children) afterTurn(ctx context.Context, requestID string, err error) error {
	a := cs.a
	if ctx.Err() != nil || (err != nil && (fiber.LogFailed(err) || eventlog.OwnerLost(err))) || a.cfg.Peers == nil {
		return err
	}
	info, ierr := a.store.Turn(a.agent, requestID)
	if ierr != nil || info.Parent == nil || info.Active() {
		return err
	}
	if nerr := a.notifyParent(ctx, info); nerr != nil {
		return errors.Join(err, nerr)
	}
	return err
}

// checkParent checks the parent of a sub-agent's Send: a call that would
// make this agent its own caller is a cycle.
func (cs *children) checkParent(p *ParentRef) error {
	a := cs.a
	switch {
	case p == nil:
		return nil
	case !eventlog.ValidToken(p.Agent) || p.RequestID == "" || p.CallID == "":
		return fmt.Errorf("%w: parent: agent, requestId and callId are required", ErrInvalidMessage)
	case p.Mode != ModeEphemeral && p.Mode != ModePersistent:
		return fmt.Errorf("%w: parent: mode %q, want %q or %q", ErrInvalidMessage, p.Mode, ModeEphemeral, ModePersistent)
	case slices.Contains(p.Chain, a.agent):
		return fmt.Errorf("%w: agent %s is already in the chain of calls %v: a cycle", ErrInvalidMessage, a.agent, p.Chain)
	}
	return nil
}
