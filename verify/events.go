package verify

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/forever-agents/forever/chat"
	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/fiber"
)

// fiberData is the subset of fiber events' data Check reads.
type fiberData struct {
	ID       string `json:"id"`
	Name     string `json:"name"`
	Attempt  int    `json:"attempt"`
	Attempts *int   `json:"attempts"`
	Fiber    string `json:"fiber"`
	OpID     string `json:"opId"`
	NextOpID string `json:"nextOpId"` // op.completed of a fiber.ThenStep
}

// turnData is the subset of turn and message events' data Check reads.
type turnData struct {
	RequestID          string `json:"requestId"`
	StreamID           string `json:"streamId"`
	MessageID          string `json:"messageId"` // turn.started: the user message it answers
	FiberID            string `json:"fiberId"`   // turn.started: its fiber, when named
	AssistantMessageID string `json:"assistantMessageId"`
	ID                 string `json:"id"`   // message.appended
	Role               string `json:"role"` // message.appended
	// Parent is a sub-agent turn's call (turn.started).
	Parent *struct {
		Agent     string `json:"agent"`
		RequestID string `json:"requestId"`
		CallID    string `json:"callId"`
	} `json:"parent"`
	// Message is turn.started's user message, when it carries it, and
	// turn.completed's assistant message at record format 8.
	Message *struct {
		ID   string `json:"id"`
		Role string `json:"role"`
	} `json:"message"`
}

type agentState struct {
	id     string
	fibers map[string]*fiberState
	// byName finds a turn's fiber: "__chat_turn:<requestId>" -> fiber id.
	byName map[string]string
	turns  map[string]*turnState
	order  []string // request ids in turn.started order
	// appended counts message.appended per message id.
	appended map[string]int
	// users holds the user messages appended (message.appended with role
	// user), by id, with the sequence of the first; answered the message
	// ids a turn.started answers.
	users    map[string]eventlog.Seq
	answered map[string]bool
	// stored holds every user message id read: appended, or carried by
	// the turn.started answering it (Report.UserMessages).
	stored map[string]bool
	// runs counts the turn.started naming each user message since the
	// agent's last messages.truncated (which lets a message id be sent
	// again).
	runs map[string]int
	// compacted is set once a snapshot of the agent was read: the history
	// before it may be gone.
	compacted bool
	// links are the agent's sub-agent calls by turn and call id, in the
	// order of their first event.
	links     map[string]*linkState
	linkOrder []string
	// deleted is set once the agent's tombstone was read: its life before
	// it is gone from the log.
	deleted bool
	// summaries counts context.summarized per message id it covers up to,
	// since the agent's last messages.truncated.
	summaries map[string]int
}

func newAgentState(id string) *agentState {
	return &agentState{
		id:       id,
		fibers:   map[string]*fiberState{},
		byName:   map[string]string{},
		turns:    map[string]*turnState{},
		appended: map[string]int{},
		users:    map[string]eventlog.Seq{},
		answered: map[string]bool{},
		stored:   map[string]bool{},
		runs:     map[string]int{},
		links:    map[string]*linkState{},

		summaries: map[string]int{},
	}
}

type fiberState struct {
	name    string
	ended   string // end event type, "" while running
	endSeq  eventlog.Seq
	attempt int // last recovery attempt, or the count a stash set
	ops     map[string]*opState
}

type opState struct {
	started   bool
	completed int
}

type turnState struct {
	seq       eventlog.Seq
	stream    string
	assistant string
	fiber     string // the turn's fiber, "" when it had none
	outcome   string // outcome event type, "" while none
}

// event checks one event of the events stream, each record it stands for
// when it carries a fiber's end (fiber.EachRecord, record format 11).
func (c *checker) event(e eventlog.Event) {
	c.events++
	_ = fiber.EachRecord(e, func(x eventlog.Event) error {
		c.record(x)
		return nil
	})
}

// record checks one record of the events stream.
func (c *checker) record(e eventlog.Event) {
	c.seen(e.Agent, e.ID)
	if first, ok := c.latest[e.Agent]; ok && e.Seq < first {
		c.superseded[e.Agent]++
		return
	}
	if e.Type == eventlog.TypeDeleted {
		// The agent was deleted here: a new life of the id starts empty.
		a := newAgentState(e.Agent)
		a.deleted = true
		c.agents[e.Agent] = a
		return
	}
	c.collectRefs(e)
	a := c.agent(e.Agent)
	switch e.Type {
	case fiber.EventStarted, fiber.EventStashed, fiber.EventRecovered,
		fiber.EventCompleted, fiber.EventFailed, fiber.EventAbandoned,
		fiber.EventOpStarted, fiber.EventOpCompleted:
		var d fiberData
		if err := json.Unmarshal(e.Data, &d); err != nil {
			c.violate(Violation{Kind: KindCorrupt, Agent: e.Agent, Seq: e.Seq,
				Text: fmt.Sprintf("%s data does not decode: %v", e.Type, err)})
			return
		}
		c.fiberEvent(a, e, d)
	case chat.EventMessagesTruncated:
		clear(a.runs)
		clear(a.summaries)
	case chat.EventContextSummarized:
		c.summaryEvent(a, e)
	case chat.EventSubagentStarted, chat.EventSubagentEnded:
		c.linkEvent(a, e)
	case chat.EventTurnStarted, chat.EventTurnCompleted, chat.EventTurnFailed,
		chat.EventTurnInterrupted, chat.EventMessageAppended:
		var d turnData
		if err := json.Unmarshal(e.Data, &d); err != nil {
			c.violate(Violation{Kind: KindCorrupt, Agent: e.Agent, Seq: e.Seq,
				Text: fmt.Sprintf("%s data does not decode: %v", e.Type, err)})
			return
		}
		if e.Type == chat.EventTurnCompleted && d.Message != nil && d.Message.ID != "" {
			// Record format 8: the turn's assistant message, stored with
			// its outcome, counts as its message.appended just before.
			c.turnEvent(a, eventlog.Event{Type: chat.EventMessageAppended, Seq: e.Seq, Agent: e.Agent},
				turnData{ID: d.Message.ID, Role: d.Message.Role})
		}
		c.turnEvent(a, e, d)
	case chat.EventMessagePart:
		// A message event too large for one event, split: its last part
		// is where the messages view applies it, so a whole set of parts
		// of message.appended counts as one append of the message.
		var p struct {
			ID    string `json:"id"`
			Type  string `json:"type"`
			Part  int    `json:"part"`
			Parts int    `json:"parts"`
		}
		if err := json.Unmarshal(e.Data, &p); err != nil {
			c.violate(Violation{Kind: KindCorrupt, Agent: e.Agent, Seq: e.Seq,
				Text: fmt.Sprintf("%s data does not decode: %v", e.Type, err)})
			return
		}
		if p.Type == chat.EventMessageAppended && p.Parts > 0 && p.Part == p.Parts-1 {
			c.turnEvent(a, eventlog.Event{Type: chat.EventMessageAppended, Seq: e.Seq, Agent: e.Agent}, turnData{ID: p.ID})
		}
	case eventlog.TypeSnapshot:
		var s eventlog.Snapshot
		if err := json.Unmarshal(e.Data, &s); err != nil {
			c.violate(Violation{Kind: KindCorrupt, Agent: e.Agent, Seq: e.Seq,
				Text: fmt.Sprintf("%s data does not decode: %v", e.Type, err)})
			return
		}
		c.snapshot(a, e, s)
	}
}

// findSnapshot notes where the agent's latest snapshot so far starts.
func (c *checker) findSnapshot(e eventlog.Event) {
	if e.Type == eventlog.TypeDeleted && e.Stream == "" {
		// An agent's tombstone (eventlog.Delete): what came before it is
		// gone, as from its views.
		if e.Seq > c.latest[e.Agent] {
			c.latest[e.Agent], c.tombstone[e.Agent] = e.Seq, e.Seq
		}
		return
	}
	if e.Type != eventlog.TypeSnapshot || e.Stream != "" {
		return
	}
	var s struct {
		Part int `json:"part"`
	}
	if err := json.Unmarshal(e.Data, &s); err != nil || s.Part < 0 || eventlog.Seq(s.Part) >= e.Seq {
		return // the second pass reports it
	}
	if first := e.Seq - eventlog.Seq(s.Part); first > c.latest[e.Agent] {
		c.latest[e.Agent] = first
	}
}

// snapshot takes one part of an agent snapshot as the agent's history up
// to it: the live fibers with their ops and attempts, every turn with its
// outcome, every message appended. Only an agent's latest snapshot is
// read: the events before it (an earlier snapshot, history a purge left)
// are superseded and skipped (findSnapshot, KindSuperseded).
func (c *checker) snapshot(a *agentState, e eventlog.Event, s eventlog.Snapshot) {
	a.compacted = true
	bad := func(err error) {
		c.violate(Violation{Kind: KindCorrupt, Agent: a.id, Seq: e.Seq, Text: "snapshot rows do not decode: " + err.Error()})
	}
	if sv, ok := s.Views[fiber.RunsName]; ok {
		rows, ops, err := fiber.SnapshotRuns(sv)
		if err != nil {
			bad(err)
		}
		for _, r := range rows {
			c.seen(a.id, r.ID)
			if _, ok := a.fibers[r.ID]; ok {
				continue
			}
			a.fibers[r.ID] = &fiberState{name: r.Name, attempt: r.Attempt, ops: map[string]*opState{}}
			if r.Name != "" {
				a.byName[r.Name] = r.ID
			}
		}
		for _, o := range ops {
			if f := a.fibers[o.Fiber]; f != nil {
				if _, ok := f.ops[o.ID]; !ok {
					op := f.op(o.ID)
					op.started = true
					if o.Completed {
						op.completed = 1
					}
				}
			}
		}
	}
	if sv, ok := s.Views[chat.ContextProjectionName]; ok {
		sums, err := chat.SnapshotSummaries(sv)
		if err != nil {
			bad(err)
		}
		for _, sum := range sums {
			if a.summaries[sum.Upto] == 0 {
				a.summaries[sum.Upto] = 1
			}
		}
	}
	if sv, ok := s.Views[chat.TurnsProjectionName]; ok {
		turns, err := chat.SnapshotTurns(sv)
		if err != nil {
			bad(err)
		}
		for _, t := range turns {
			c.seen(a.id, t.RequestID)
			if _, ok := a.turns[t.RequestID]; ok {
				continue
			}
			a.turns[t.RequestID] = &turnState{seq: t.StartedSeq, stream: t.StreamID, assistant: t.AssistantMessageID,
				fiber: a.byName[chat.TurnFiberPrefix+t.RequestID], outcome: outcomeOf(t.Status)}
			a.order = append(a.order, t.RequestID)
			if t.MessageID != "" {
				a.answered[t.MessageID] = true
			}
		}
		slices.SortStableFunc(a.order, func(x, y string) int { return cmp.Compare(a.turns[x].seq, a.turns[y].seq) })
		links, err := chat.SnapshotLinks(sv)
		if err != nil {
			bad(err)
		}
		c.snapshotLinks(a, links)
	}
	if sv, ok := s.Views[chat.MessagesProjectionName]; ok {
		for _, id := range chat.SnapshotMessageIDs(sv) {
			if a.appended[id] == 0 {
				a.appended[id] = 1
			}
		}
	}
}

// outcomeOf is the outcome event of a turn record's status ("" while it
// streams).
func outcomeOf(status string) string {
	switch status {
	case chat.TurnCompleted:
		return chat.EventTurnCompleted
	case chat.TurnFailed:
		return chat.EventTurnFailed
	case chat.TurnInterrupted:
		return chat.EventTurnInterrupted
	}
	return ""
}

func (c *checker) fiberEvent(a *agentState, e eventlog.Event, d fiberData) {
	id := d.ID
	if e.Type == fiber.EventOpStarted || e.Type == fiber.EventOpCompleted {
		id = d.Fiber
	}
	v := Violation{Agent: a.id, Fiber: id, Seq: e.Seq}
	if e.Type == fiber.EventStarted {
		c.seen(a.id, id)
		if f, ok := a.fibers[id]; ok {
			v.Kind, v.Text = KindFiberStartedTwice, fmt.Sprintf("fiber.started again for fiber %q (%s)", f.name, stateOf(f))
			c.violate(v)
			return
		}
		if prev, ok := a.byName[d.Name]; ok && strings.HasPrefix(d.Name, chat.TurnFiberPrefix) {
			if pf := a.fibers[prev]; pf != nil && pf.ended == "" {
				v.Request = strings.TrimPrefix(d.Name, chat.TurnFiberPrefix)
				v.Kind, v.Text = KindTurnTwoFibers, fmt.Sprintf("fiber %s of turn %q started while its fiber %s runs: a turn has one fiber at a time", id, d.Name, prev)
				c.violate(v)
			}
		}
		f := &fiberState{name: d.Name, ops: map[string]*opState{}}
		a.fibers[id] = f
		if d.Name != "" {
			a.byName[d.Name] = id
		}
		if d.OpID != "" { // its first step's op.started (fiber.FirstStep)
			f.op(d.OpID).started = true
		}
		return
	}
	f, ok := a.fibers[id]
	if !ok {
		v.Kind, v.Text = KindFiberUnknown, e.Type+" of a fiber that never started"
		c.violate(v)
		return
	}
	if f.ended != "" {
		kind := KindAfterEnd
		if isEnd(e.Type) {
			kind = KindFiberEndedTwice
		}
		v.Kind, v.Text = kind, fmt.Sprintf("%s of fiber %q after its %s at seq %d", e.Type, f.name, f.ended, f.endSeq)
		c.violate(v)
		return
	}
	switch e.Type {
	case fiber.EventStashed:
		if d.Attempts != nil && *d.Attempts >= 0 {
			f.attempt = *d.Attempts
		}
		if d.NextOpID != "" {
			f.op(d.NextOpID).started = true // the next step's op.started (fiber.AnnounceStep)
		}
	case fiber.EventRecovered:
		if d.Attempt != f.attempt+1 {
			v.Kind, v.Text = KindRecoveryAttempt, fmt.Sprintf("fiber %q recovered with attempt %d, want %d (one more than the last recorded)", f.name, d.Attempt, f.attempt+1)
			c.violate(v)
		}
		f.attempt = d.Attempt
	case fiber.EventOpStarted:
		op := f.op(d.OpID)
		op.started = true
	case fiber.EventOpCompleted:
		if d.Attempts != nil && *d.Attempts >= 0 {
			f.attempt = *d.Attempts // a snapshot recorded with the step (ThenStash)
		}
		if d.NextOpID != "" {
			f.op(d.NextOpID).started = true // the next step's op.started (fiber.ThenStep)
		}
		op := f.op(d.OpID)
		op.completed++
		switch {
		case op.completed > 1:
			v.Kind, v.Text = KindOpCompletedTwice, fmt.Sprintf("op %s of fiber %q completed %d times", d.OpID, f.name, op.completed)
			c.violate(v)
		case !op.started:
			v.Kind, v.Text = KindOpNotStarted, fmt.Sprintf("op %s of fiber %q completed without op.started", d.OpID, f.name)
			c.violate(v)
		}
	case fiber.EventCompleted, fiber.EventFailed, fiber.EventAbandoned:
		f.ended, f.endSeq = e.Type, e.Seq
	}
}

func (f *fiberState) op(id string) *opState {
	op := f.ops[id]
	if op == nil {
		op = &opState{}
		f.ops[id] = op
	}
	return op
}

func isEnd(typ string) bool {
	return typ == fiber.EventCompleted || typ == fiber.EventFailed || typ == fiber.EventAbandoned
}

func stateOf(f *fiberState) string {
	if f.ended != "" {
		return "it ended with " + f.ended
	}
	return "it is running"
}

func (c *checker) turnEvent(a *agentState, e eventlog.Event, d turnData) {
	v := Violation{Agent: a.id, Request: d.RequestID, Seq: e.Seq}
	switch e.Type {
	case chat.EventMessageAppended:
		a.appended[d.ID]++
		if _, ok := a.users[d.ID]; d.Role == chat.RoleUser && d.ID != "" && !ok {
			a.users[d.ID] = e.Seq
			a.stored[d.ID] = true
		}
		// Checked at the end: the turn.started naming it (as its
		// assistant message, or the user message it answers) may come
		// before or after.
		return
	case chat.EventTurnStarted:
		c.seen(a.id, d.RequestID)
		v.Stream = d.StreamID
		if _, ok := a.turns[d.RequestID]; ok {
			v.Kind, v.Text = KindTurnStartedTwice, "turn.started again for the same request id"
			c.violate(v)
			return
		}
		// The previous turn only: one before it without an outcome was
		// reported when the previous one started.
		if n := len(a.order); n > 0 {
			prev := a.order[n-1]
			if t := a.turns[prev]; t.outcome == "" {
				v.Kind, v.Text = KindTurnOverlap, fmt.Sprintf("turn started while turn %s (started at seq %d) had no outcome", prev, t.seq)
				c.violate(v)
			}
		}
		fid, ok := a.byName[chat.TurnFiberPrefix+d.RequestID]
		if d.FiberID != "" {
			_, ok = a.fibers[d.FiberID]
			fid = d.FiberID
		}
		if !ok {
			v.Kind, v.Text = KindTurnNoFiber, "turn.started without its fiber "+chat.TurnFiberPrefix+d.RequestID+" started before it"
			c.violate(v)
		}
		a.turns[d.RequestID] = &turnState{seq: e.Seq, stream: d.StreamID, assistant: d.AssistantMessageID, fiber: fid}
		a.order = append(a.order, d.RequestID)
		c.childTurnStarted(a.id, e, d)
		if d.Message != nil && d.Message.ID != "" {
			a.stored[d.Message.ID] = true
		}
		if d.MessageID != "" {
			// Its user message: stored in this event (message) or in a
			// message.appended of its own.
			a.answered[d.MessageID] = true
			if a.runs[d.MessageID]++; a.runs[d.MessageID] > 1 {
				v.Kind, v.Text = KindMessageAnsweredTwice, fmt.Sprintf("user message %s is answered by a second turn: one command ran twice", d.MessageID)
				c.violate(v)
			}
		}
	default: // an outcome
		t, ok := a.turns[d.RequestID]
		switch {
		case !ok:
			v.Kind, v.Text = KindTurnOutcomeUnknown, e.Type+" of a turn that never started"
			c.violate(v)
		case t.outcome != "":
			v.Stream = t.stream
			v.Kind, v.Text = KindTurnOutcomeTwice, fmt.Sprintf("%s after the turn's %s: a turn records one outcome", e.Type, t.outcome)
			c.violate(v)
		default:
			t.outcome = e.Type
		}
	}
}

// finishAgent checks what needs the agent's whole history: user messages
// without a turn, assistant messages, turns whose fiber ended without an
// outcome, and streams of ended turns that never ended.
func (c *checker) finishAgent(a *agentState) {
	ids := sortedKeys(a.users)
	slices.SortStableFunc(ids, func(x, y string) int { return cmp.Compare(a.users[x], a.users[y]) })
	for _, id := range ids {
		if !a.answered[id] {
			c.violate(Violation{Kind: KindUserMessageUnanswered, Agent: a.id, Seq: a.users[id],
				Text: fmt.Sprintf("user message %s is stored without a turn that answers it: the question will never be answered", id)})
		}
	}
	for _, rid := range a.order {
		t := a.turns[rid]
		if s := c.streams[streamKey{a.id, t.stream}]; t.outcome != "" && s != nil && !s.expired && s.terminal == "" {
			c.violate(Violation{Kind: KindStreamNoTerminal, Agent: a.id, Request: rid, Stream: t.stream,
				Text: fmt.Sprintf("the turn recorded %s but its stream has no terminal chunk (finish, error or abort): clients following it wait forever", t.outcome)})
		}
		if n := a.appended[t.assistant]; t.assistant != "" && n > 1 {
			c.violate(Violation{Kind: KindMessageAppendedTwice, Agent: a.id, Request: rid, Stream: t.stream,
				Text: fmt.Sprintf("the turn's assistant message %s was appended %d times (then it is updated, not appended)", t.assistant, n)})
		}
		if t.outcome != "" {
			continue
		}
		fid := t.fiber
		if f := a.fibers[fid]; f != nil && f.ended != "" {
			c.notes = append(c.notes, Violation{Kind: KindTurnOrphaned, Agent: a.id, Fiber: fid, Request: rid, Stream: t.stream, Seq: f.endSeq,
				Text: fmt.Sprintf("the turn's fiber ended (%s) without the turn's outcome; the agent's next turn ends it", strings.TrimPrefix(f.ended, "fiber."))})
		}
	}
}

// summaryEvent checks a context.summarized: a summary of the conversation
// up to a message is made once (a turn recovered after making it reuses
// the recorded result), so one message is named by at most one
// context.summarized since the agent's last messages.truncated.
func (c *checker) summaryEvent(a *agentState, e eventlog.Event) {
	var s chat.Summary
	if err := json.Unmarshal(e.Data, &s); err != nil {
		c.violate(Violation{Kind: KindCorrupt, Agent: e.Agent, Seq: e.Seq,
			Text: fmt.Sprintf("%s data does not decode: %v", e.Type, err)})
		return
	}
	if a.summaries[s.Upto]++; a.summaries[s.Upto] > 1 {
		c.violate(Violation{Kind: KindSummaryTwice, Agent: e.Agent, Request: s.RequestID, Seq: e.Seq,
			Text: fmt.Sprintf("the conversation up to message %s was summarized %d times", s.Upto, a.summaries[s.Upto])})
	}
}
