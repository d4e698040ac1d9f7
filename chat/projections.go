package chat

import (
	"cmp"
	"encoding/binary"
	"encoding/json"
	"errors"
	"iter"
	"strings"
	"time"

	"github.com/forever-agents/forever/chat/cost"
	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/fiber"
)

// Projection names and versions of the chat read side. Every Apply reads
// only the event (its data, Seq and Time), so each view is rebuilt exactly
// from the log.
const (
	MessagesProjectionName   = "messages"
	StateProjectionName      = "chatstate"
	UsageProjectionName      = "usage"
	InterruptsProjectionName = "interrupts"
	TurnsProjectionName      = "turns"
)

// Key layouts. Agent ids, stream ids and names are subject tokens, so they
// contain no NUL.
//
//	messages:   n\0<agent>                 next index (8 bytes, big endian)
//	            m\0<agent>\0<index>        Message JSON, index 8 bytes BE (or the head
//	                                       of a message stored in pieces: bigmessage.go)
//	            x\0<agent>\0<index><piece> a piece of a large message's JSON
//	            q\0<agent>\0<id>\0<part>   a message.part whose set is not complete
//	            i\0<agent>\0<id>           index of message id
//	            b\0<agent>                 a fork's parent and inherited count (fork.go)
//	            F\0<agent>\0<fork>         a fork's agent.forked sequence and inherited count
//	chatstate:  s\0<agent>                 stateSet JSON
//	usage:      u\0<agent>                 Usage JSON (roll-up)
//	            r\0<agent>\0<requestId>    usageRecorded JSON (one per request)
//	interrupts: f\0<agent>\0<name>         "1" while set
//	turns:      t\0<agent>\0<requestId>    TurnInfo JSON
//	            a\0<agent>                 request id of the active turn
//	            l\0<agent>                 request id of the last turn started
//	            f\0<agent>\0<fiberId>      request id of a running turn fiber
//	            k\0<agent>\0<requestId>\0<callId>  ChildLink JSON (subagent_view.go)
//	            w, v, y: the queue of queued messages (queue_view.go)
func msgNextKey(agent string) []byte { return []byte("n\x00" + agent) }
func msgKey(agent string, idx uint64) []byte {
	return binary.BigEndian.AppendUint64([]byte("m\x00"+agent+"\x00"), idx)
}
func msgIDKey(agent, id string) []byte       { return []byte("i\x00" + agent + "\x00" + id) }
func stateKey(agent string) []byte           { return []byte("s\x00" + agent) }
func usageKey(agent string) []byte           { return []byte("u\x00" + agent) }
func usageReqKey(agent, req string) []byte   { return []byte("r\x00" + agent + "\x00" + req) }
func interruptKey(agent, name string) []byte { return []byte("f\x00" + agent + "\x00" + name) }
func turnKey(agent, req string) []byte       { return []byte("t\x00" + agent + "\x00" + req) }
func activeTurnKey(agent string) []byte      { return []byte("a\x00" + agent) }
func lastTurnKey(agent string) []byte        { return []byte("l\x00" + agent) }
func turnFiberKey(agent, id string) []byte   { return []byte("f\x00" + agent + "\x00" + id) }

// agentRows is the AgentRows of a chat view: its rows under exact keys
// (each a function of the agent) and under tag prefixes ("<tag>\0<agent>\0").
func agentRows(exact func(agent string) [][]byte, tags func(agent string) [][]byte) func(eventlog.Reader, string) iter.Seq2[eventlog.KV, error] {
	return func(r eventlog.Reader, agent string) iter.Seq2[eventlog.KV, error] {
		var ks, ps [][]byte
		if exact != nil {
			ks = exact(agent)
		}
		if tags != nil {
			ps = tags(agent)
		}
		return eventlog.Rows(r, ks, ps)
	}
}

func keys(fs ...func(agent string) []byte) func(string) [][]byte {
	return func(agent string) [][]byte {
		out := make([][]byte, len(fs))
		for i, f := range fs {
			out[i] = f(agent)
		}
		return out
	}
}

func prefixes(tags ...string) func(string) [][]byte {
	return func(agent string) [][]byte {
		out := make([][]byte, len(tags))
		for i, t := range tags {
			out[i] = []byte(t + "\x00" + agent + "\x00")
		}
		return out
	}
}

func decodeIndex(b []byte) (uint64, bool)  { return binary.BigEndian.Uint64(b), len(b) == 8 }
func encodeIndex(v uint64) []byte          { return binary.BigEndian.AppendUint64(nil, v) }
func corrupt(what string, err error) error { return &eventlog.CorruptError{What: what, Err: err} }
func isNotFound(err error) bool            { return errors.Is(err, eventlog.ErrNotFound) }

// getter is the read part shared by a Batch and a View.
type getter interface {
	Get(key []byte) ([]byte, error)
}

func getJSON(g getter, key []byte, v any) (bool, error) {
	raw, err := g.Get(key)
	if isNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return false, corrupt("chat row "+string(key), err)
	}
	return true, nil
}

func setJSON(b *eventlog.Batch, key []byte, v any) error {
	raw, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return b.Set(key, raw)
}

// decodeData decodes e's data; a payload that does not decode is skipped
// (returns false) rather than stopping the projection, so one bad event
// cannot wedge the read side. The envelope was already validated.
func decodeData(e eventlog.Event, v any) bool { return json.Unmarshal(e.Data, v) == nil }

// MessagesProjection projects message.appended, the user message a
// turn.started carries, the assistant message a turn.completed of record
// format 8 carries, message.updated and messages.truncated into each
// agent's conversation, indexed by position, and the message.part events
// of a message event too large for one event, applied as that event once
// the last part arrives. A message whose id is already present is
// ignored, so a retried append never duplicates a message, and the
// message.appended that follows a turn.started carrying the same message
// (for readers of the older format) adds nothing.
func MessagesProjection() eventlog.Projection {
	return eventlog.Projection{Name: MessagesProjectionName, Version: 1, Filter: eventlog.Filter{}, Apply: applyMessages,
		AgentRows: messagesAgentRows}
}

func applyMessages(b *eventlog.Batch, e eventlog.Event) error {
	switch e.Type {
	case EventMessageAppended:
		var m Message
		if !decodeData(e, &m) {
			return nil
		}
		return appendMessage(b, e, m)
	case EventTurnStarted, EventTurnSteered:
		var t struct {
			Message *Message  `json:"message"`
			Merged  []Message `json:"merged"`
		}
		if !decodeData(e, &t) || t.Message == nil {
			return nil
		}
		if err := appendMessage(b, e, *t.Message); err != nil {
			return err
		}
		for _, m := range t.Merged {
			if err := appendMessage(b, e, m); err != nil {
				return err
			}
		}
		return nil
	case EventMessageUpdated:
		var u messageUpdated
		if !decodeData(e, &u) {
			return nil
		}
		idx, ok, err := messageIndex(b, e.Agent, u.ID)
		if err != nil || !ok {
			return err
		}
		if err := copyOnWrite(b, e.Agent, idx, idx+1); err != nil {
			return err
		}
		m, pieces, _, err := getMessage(b, e.Agent, idx)
		if err != nil {
			return err
		}
		m.Parts = u.Parts
		if err := putMessage(b, e.Agent, idx, m, pieces); err != nil {
			return err
		}
		// The message is now in the agent's own rows, even when a fork
		// inherited it: so is its index.
		return b.Set(msgIDKey(e.Agent, u.ID), encodeIndex(idx))
	case EventMessagesTruncated:
		var tr messagesTruncated
		if !decodeData(e, &tr) {
			return nil
		}
		var keep uint64 // messages with index < keep stay
		if tr.AfterID != "" {
			idx, ok, err := messageIndex(b, e.Agent, tr.AfterID)
			if err != nil || !ok {
				return err
			}
			keep = idx + 1
		}
		next, err := nextIndex(b, e.Agent)
		if err != nil {
			return err
		}
		if err := copyOnWrite(b, e.Agent, keep, next); err != nil {
			return err
		}
		if err := cutInherited(b, e.Agent, keep); err != nil {
			return err
		}
		for i := keep; i < next; i++ {
			var row messageRow // the head is enough: its id and pieces
			if ok, err := getJSON(b, msgKey(e.Agent, i), &row); err != nil {
				return err
			} else if ok {
				if err := b.Delete(msgIDKey(e.Agent, row.ID)); err != nil {
					return err
				}
			}
			if err := deleteMessage(b, e.Agent, i, row.Pieces); err != nil {
				return err
			}
		}
		return b.Set(msgNextKey(e.Agent), encodeIndex(keep))
	case EventTurnCompleted:
		// Record format 8: the turn's assistant message, stored with its
		// outcome (endRecord).
		var t struct {
			Message *Message `json:"message"`
		}
		if !decodeData(e, &t) || t.Message == nil {
			return nil
		}
		return appendMessage(b, e, *t.Message)
	case EventMessagePart:
		return applyMessagePart(b, e)
	case eventlog.TypeForked:
		return applyForked(b, e)
	}
	return nil
}

// appendMessage adds m at the end of e's agent's conversation unless a
// message with its id is there.
func appendMessage(b *eventlog.Batch, e eventlog.Event, m Message) error {
	if m.ID == "" {
		return nil
	}
	if _, ok, err := messageIndex(b, e.Agent, m.ID); err != nil {
		return err
	} else if ok {
		return nil // already stored
	}
	if m.CreatedAt.IsZero() {
		m.CreatedAt = e.Time
	}
	next, err := nextIndex(b, e.Agent)
	if err != nil {
		return err
	}
	if err := putMessage(b, e.Agent, next, m, 0); err != nil {
		return err
	}
	if err := b.Set(msgIDKey(e.Agent, m.ID), encodeIndex(next)); err != nil {
		return err
	}
	return b.Set(msgNextKey(e.Agent), encodeIndex(next+1))
}

func nextIndex(g getter, agent string) (uint64, error) {
	raw, err := g.Get(msgNextKey(agent))
	if isNotFound(err) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	v, ok := decodeIndex(raw)
	if !ok {
		return 0, corrupt("message counter of "+agent, errors.New("want 8 bytes"))
	}
	return v, nil
}

// ownMessageIndex is messageIndex in agent's own rows only.
func ownMessageIndex(g getter, agent, id string) (uint64, bool, error) {
	raw, err := g.Get(msgIDKey(agent, id))
	if isNotFound(err) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	v, ok := decodeIndex(raw)
	if !ok {
		return 0, false, corrupt("message index of "+id, errors.New("want 8 bytes"))
	}
	return v, true, nil
}

// StateProjection projects state.set with compare-and-set semantics: an
// event applies only when its version is the stored version plus one, so
// whatever reaches the log, the view's versions increase by one.
func StateProjection() eventlog.Projection {
	return eventlog.Projection{Name: StateProjectionName, Version: 1, Filter: eventlog.Filter{}, Apply: applyState,
		AgentRows: agentRows(keys(stateKey), nil)}
}

func applyState(b *eventlog.Batch, e eventlog.Event) error {
	if e.Type != EventStateSet {
		return nil
	}
	var s stateSet
	if !decodeData(e, &s) {
		return nil
	}
	var cur stateSet
	if _, err := getJSON(b, stateKey(e.Agent), &cur); err != nil {
		return err
	}
	if s.Version != cur.Version+1 {
		return nil // lost a race that the writer's fence did not catch
	}
	return setJSON(b, stateKey(e.Agent), s)
}

// Usage is an agent's token usage roll-up.
type Usage struct {
	Input  int64 `json:"input"`
	Output int64 `json:"output"`
	// Turns counts the requests with recorded usage.
	Turns int `json:"turns"`
	// Subagents is the usage of the agent's sub-agents (their turns' own
	// and their sub-agents', recursively), apart from its own.
	Subagents SubagentUsage `json:"subagents,omitzero"`
	// Cost is the sum of the turns' recorded costs (their own model
	// calls'), in dollars ("0.0042").
	Cost cost.Micros `json:"cost"`
}

// UsageProjection rolls usage.recorded (and the usage a turn.completed of
// record format 8 carries) up per agent. Only the first usage of a request
// id counts, so recording is idempotent.
func UsageProjection() eventlog.Projection {
	return eventlog.Projection{Name: UsageProjectionName, Version: 1, Filter: eventlog.Filter{}, Apply: applyUsage,
		AgentRows: agentRows(keys(usageKey), prefixes("r"))}
}

// usageOf returns the usage e records: a usage.recorded's, or the one a
// turn.completed of record format 8 carries (endRecord). ok is false
// for any other event, and for one that does not decode or names no
// request.
func usageOf(e eventlog.Event) (u usageRecorded, ok bool) {
	switch e.Type {
	case EventUsageRecorded:
		if !decodeData(e, &u) {
			return u, false
		}
	case EventTurnCompleted:
		var t struct {
			Usage *usageRecorded `json:"usage"`
		}
		if !decodeData(e, &t) || t.Usage == nil {
			return u, false
		}
		u = *t.Usage
	default:
		return u, false
	}
	return u, u.RequestID != ""
}

func applyUsage(b *eventlog.Batch, e eventlog.Event) error {
	u, ok := usageOf(e)
	if !ok {
		return nil
	}
	if _, err := b.Get(usageReqKey(e.Agent, u.RequestID)); err == nil {
		return nil
	} else if !isNotFound(err) {
		return err
	}
	var sum Usage
	if _, err := getJSON(b, usageKey(e.Agent), &sum); err != nil {
		return err
	}
	sum.Input += u.Input
	sum.Output += u.Output
	sum.Turns++
	sum.Cost += u.Cost
	if u.Subagents != nil {
		sum.Subagents.add(*u.Subagents)
	}
	if err := setJSON(b, usageReqKey(e.Agent, u.RequestID), u); err != nil {
		return err
	}
	return setJSON(b, usageKey(e.Agent), sum)
}

// InterruptsProjection keeps the set interrupt flags of each agent.
func InterruptsProjection() eventlog.Projection { return interruptsProjection(nil) }

// interruptsProjection is InterruptsProjection telling flags (when not
// nil) of each commit that may set a flag.
func interruptsProjection(flags *flagCache) eventlog.Projection {
	apply := applyInterrupts
	if flags != nil {
		apply = func(b *eventlog.Batch, e eventlog.Event) error {
			flags.afterSet(b, e)
			return applyInterrupts(b, e)
		}
	}
	return eventlog.Projection{Name: InterruptsProjectionName, Version: 1, Filter: eventlog.Filter{}, Apply: apply,
		AgentRows: agentRows(nil, prefixes("f"))}
}

func applyInterrupts(b *eventlog.Batch, e eventlog.Event) error {
	if e.Type != EventInterruptSet && e.Type != EventInterruptCleared {
		return nil
	}
	var f interruptFlag
	if !decodeData(e, &f) || f.Name == "" {
		return nil
	}
	if e.Type == EventInterruptSet {
		return b.Set(interruptKey(e.Agent, f.Name), []byte("1"))
	}
	return b.Delete(interruptKey(e.Agent, f.Name))
}

// Turn statuses.
const (
	TurnStreaming   = "streaming"
	TurnCompleted   = "completed"
	TurnFailed      = "failed"
	TurnInterrupted = "interrupted"
)

// TurnInfo is one turn: its request context (kept so a continuation survives
// a restart) and its outcome.
type TurnInfo struct {
	RequestID          string `json:"requestId"`
	StreamID           string `json:"streamId"`
	MessageID          string `json:"messageId"`
	AssistantMessageID string `json:"assistantMessageId"`
	Continues          string `json:"continues,omitempty"`
	// Base and Answers: see turnStarted (a turn resuming waiting calls).
	Base         []Part          `json:"base,omitempty"`
	Answers      []ToolAnswer    `json:"answers,omitempty"`
	Body         json.RawMessage `json:"body,omitempty"`
	Tools        json.RawMessage `json:"tools,omitempty"`
	Status       string          `json:"status"`
	FinishReason string          `json:"finishReason,omitempty"`
	Error        string          `json:"error,omitempty"`
	ErrorCode    int             `json:"errorCode,omitempty"`
	Reason       string          `json:"reason,omitempty"`
	StartedSeq   eventlog.Seq    `json:"startedSeq"`
	StartedAt    time.Time       `json:"startedAt"`
	EndedAt      time.Time       `json:"endedAt,omitzero"`
	// Orphaned is set when the turn's fiber ended (fiber.completed, failed
	// or abandoned) while the turn had no outcome: nothing will end it but
	// the next Send, which records it failed. FiberError is the fiber's
	// error or reason.
	Orphaned   bool   `json:"orphaned,omitempty"`
	FiberError string `json:"fiberError,omitempty"`
	// FiberID is the turn's fiber, when its turn.started names it: only
	// that fiber's end can orphan the turn, not the end of another fiber
	// of the same name (a copy of the command refused as a duplicate).
	FiberID string `json:"fiberId,omitempty"`
	// Parent is set on a sub-agent's turn: the call that started it.
	Parent *ParentRef `json:"parent,omitempty"`
	// TraceParent and ParentSpanID: the turn's invoke_agent span, when
	// its turn.started carries it (see turnStarted).
	TraceParent  string `json:"traceparent,omitempty"`
	ParentSpanID string `json:"parentSpanId,omitempty"`
	// Steered counts the messages steered into the turn (turn.steered).
	Steered int `json:"steered,omitempty"`
	// Merged are the ids of the messages a merged or debounced batch's
	// turn answers after its MessageID (MultitaskMerge), in order.
	Merged []string `json:"merged,omitempty"`
	// Version is the version of the code that started the turn (its
	// turn.started's), "" when unversioned.
	Version string `json:"version,omitempty"`
}

// Active reports whether the turn has not ended.
func (t TurnInfo) Active() bool { return t.Status == TurnStreaming }

// TurnsProjection keeps each turn's request context and outcome, and the
// active and last turn of each agent.
func TurnsProjection() eventlog.Projection {
	return eventlog.Projection{Name: TurnsProjectionName, Version: 2, Filter: eventlog.Filter{}, Apply: applyTurns,
		AgentRows: agentRows(keys(activeTurnKey, lastTurnKey), prefixes("t", "f", "k", "w", "v", "y"))}
}

// fiberEvent is the part of the fiber package's events the turns view reads.
type fiberEvent struct {
	ID     string `json:"id"`
	Name   string `json:"name"`
	Error  string `json:"error"`
	Reason string `json:"reason"`
}

// applyTurnFiber tracks the turn fibers of an agent: a turn whose fiber
// ends before the turn's outcome is recorded is marked Orphaned.
func applyTurnFiber(b *eventlog.Batch, e eventlog.Event) error {
	var fe fiberEvent
	if !decodeData(e, &fe) || fe.ID == "" {
		return nil
	}
	key := turnFiberKey(e.Agent, fe.ID)
	if e.Type == fiber.EventStarted {
		if req, ok := strings.CutPrefix(fe.Name, TurnFiberPrefix); ok && req != "" {
			return b.Set(key, []byte(req))
		}
		return nil
	}
	req, err := b.Get(key)
	if isNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if err := b.Delete(key); err != nil {
		return err
	}
	var t TurnInfo
	ok, err := getJSON(b, turnKey(e.Agent, string(req)), &t)
	if err != nil || !ok || !t.Active() || (t.FiberID != "" && t.FiberID != fe.ID) {
		return err
	}
	t.Orphaned, t.FiberError = true, cmp.Or(fe.Error, fe.Reason, e.Type)
	return setJSON(b, turnKey(e.Agent, t.RequestID), t)
}

// applyTurns applies each record e stands for: a turn.completed that
// carries its fiber's end (record format 11) is itself, then the end.
func applyTurns(b *eventlog.Batch, e eventlog.Event) error {
	return fiber.EachRecord(e, func(x eventlog.Event) error { return applyTurnRecord(b, x) })
}

func applyTurnRecord(b *eventlog.Batch, e eventlog.Event) error {
	switch e.Type {
	case fiber.EventStarted, fiber.EventCompleted, fiber.EventFailed, fiber.EventAbandoned:
		if err := applyQueue(b, e); err != nil {
			return err
		}
		return applyTurnFiber(b, e)
	case EventSubagentStarted, EventSubagentEnded:
		return applyLink(b, e)
	case EventTurnSteered:
		return applySteered(b, e)
	case EventTurnStarted:
		var ts struct {
			turnStarted
			Tools json.RawMessage `json:"tools,omitempty"`
		}
		if !decodeData(e, &ts) || ts.RequestID == "" {
			return nil
		}
		if _, err := b.Get(turnKey(e.Agent, ts.RequestID)); err == nil {
			return nil // a retried append
		} else if !isNotFound(err) {
			return err
		}
		t := TurnInfo{
			RequestID: ts.RequestID, StreamID: ts.StreamID, MessageID: ts.MessageID,
			AssistantMessageID: ts.AssistantMessageID, Continues: ts.Continues, Base: ts.Base, Answers: ts.Answers,
			Body: ts.Body, Tools: ts.Tools, Status: TurnStreaming, StartedSeq: e.Seq, StartedAt: e.Time, FiberID: ts.FiberID,
			Parent:      ts.Parent,
			TraceParent: ts.TraceParent, ParentSpanID: ts.ParentSpanID, Version: ts.Version,
		}
		for _, m := range ts.Merged {
			t.Merged = append(t.Merged, m.ID)
		}
		if err := setJSON(b, turnKey(e.Agent, t.RequestID), t); err != nil {
			return err
		}
		if err := dequeue(b, e.Agent, t.RequestID); err != nil {
			return err
		}
		for _, req := range ts.MergedFrom {
			if err := dequeue(b, e.Agent, req); err != nil {
				return err
			}
		}
		if err := b.Set(activeTurnKey(e.Agent), []byte(t.RequestID)); err != nil {
			return err
		}
		return b.Set(lastTurnKey(e.Agent), []byte(t.RequestID))
	case EventTurnCompleted, EventTurnFailed, EventTurnInterrupted:
		var te turnEnded
		if !decodeData(e, &te) {
			return nil
		}
		var t TurnInfo
		ok, err := getJSON(b, turnKey(e.Agent, te.RequestID), &t)
		if err != nil || !ok || !t.Active() {
			return err
		}
		switch e.Type {
		case EventTurnCompleted:
			t.Status, t.FinishReason = TurnCompleted, te.FinishReason
		case EventTurnFailed:
			t.Status, t.Error, t.ErrorCode = TurnFailed, te.Error, te.Code
		default:
			t.Status, t.Reason = TurnInterrupted, te.Reason
		}
		t.EndedAt = e.Time
		if err := setJSON(b, turnKey(e.Agent, t.RequestID), t); err != nil {
			return err
		}
		if cur, err := b.Get(activeTurnKey(e.Agent)); err == nil && string(cur) == t.RequestID {
			return b.Delete(activeTurnKey(e.Agent))
		} else if err != nil && !isNotFound(err) {
			return err
		}
	}
	return nil
}

// SnapshotTurns decodes the turns view's turn records in one agent
// snapshot part (eventlog.Snapshot.Views[TurnsProjectionName]), and
// SnapshotMessageIDs the ids of the messages view's messages: for readers
// of the log alone (package verify).
func SnapshotTurns(sv eventlog.SnapshotView) ([]TurnInfo, error) {
	var out []TurnInfo
	for _, kv := range sv.Rows {
		if !strings.HasPrefix(string(kv.Key), "t\x00") {
			continue
		}
		var t TurnInfo
		if err := json.Unmarshal(kv.Value, &t); err != nil {
			return nil, corrupt("turn row in a snapshot", err)
		}
		out = append(out, t)
	}
	return out, nil
}

// SnapshotMessageIDs: see SnapshotTurns.
func SnapshotMessageIDs(sv eventlog.SnapshotView) []string {
	var out []string
	for _, kv := range sv.Rows {
		if k := string(kv.Key); strings.HasPrefix(k, "i\x00") {
			if i := strings.LastIndexByte(k, 0); i >= 0 {
				out = append(out, k[i+1:])
			}
		}
	}
	return out
}
