package chat

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/forever-agents/forever/chat/chunk"
	"github.com/forever-agents/forever/eventlog"
)

// Store is the chat read side of a process, opened once per Log and shared
// by every Agent: the projections of stream metadata, messages, agent state,
// usage, interrupt flags and turns. It is safe for concurrent use.
type Store struct {
	// blobs resolves the references of stored parts (SetBlobs).
	blobs Blobs
	// hist caches the decoded rows of History (historycache.go).
	hist *historyCache
	// flags caches the interrupt flags found unset (interruptflags.go).
	flags *flagCache
	// unbudgeted caches the agents found without budget limits (a flag
	// cache of one flag an agent: budgetlimits.go).
	unbudgeted *flagCache
	streams    *chunk.Streams
	messages   *eventlog.View
	state      *eventlog.View
	usage      *eventlog.View
	interrupts *eventlog.View
	turns      *eventlog.View
	budget     *eventlog.View
	context    *eventlog.View

	chunkPr  *eventlog.Projector // streams
	eventPrs []waiter            // the others, all on the events stream
}

// waiter is what a Store waits on: a Projector or a Follower.
type waiter interface {
	Ready() <-chan struct{}
	WaitFor(ctx context.Context, seq eventlog.Seq) error
}

// eventProjections are the chat projections of the events stream, the
// interrupts view telling s.flags of the flags it may set and the budget
// view telling s.unbudgeted of the limits it may set.
func (s *Store) eventProjections() []eventlog.Projection {
	return []eventlog.Projection{
		MessagesProjection(), StateProjection(), UsageProjection(),
		interruptsProjection(s.flags), TurnsProjection(), budgetProjection(s.unbudgeted),
		ContextProjection(),
	}
}

// AddStore registers the chat projections of the events stream (messages,
// state, usage, interrupts, turns) on views, a Follower of lg's events
// stream, and the stream metadata projection of the chunks stream on a
// Projector of its own, returned. The caller runs both (Run) and waits for
// them (WaitReady) before using the Store; WaitFor then waits on views' one
// cursor. Call it once per Log.
func AddStore(lg *eventlog.Log, views *eventlog.Follower) (*Store, *eventlog.Projector, error) {
	s, err := newStore(lg)
	if err != nil {
		return nil, nil, err
	}
	s.eventPrs = []waiter{views}
	for _, p := range s.eventProjections() {
		if err := views.Add(p); err != nil {
			return nil, nil, fmt.Errorf("chat: open store: %w", err)
		}
		if err := s.setView(lg, p.Name); err != nil {
			return nil, nil, err
		}
	}
	return s, s.chunkPr, nil
}

// newStore returns a Store with the streams projection of the chunks
// stream on a Projector of its own, and no views of the events stream yet.
func newStore(lg *eventlog.Log) (*Store, error) {
	pr, err := lg.NewProjector(chunk.StreamsProjection())
	if err != nil {
		return nil, fmt.Errorf("chat: open store: %w", err)
	}
	v, err := lg.View(chunk.StreamsProjectionName)
	if err != nil {
		return nil, fmt.Errorf("chat: open store: %w", err)
	}
	return &Store{chunkPr: pr, streams: chunk.NewStreams(v), hist: newHistoryCache(historyCacheBytes),
		flags: newFlagCache(), unbudgeted: newFlagCache()}, nil
}

func (s *Store) setView(lg *eventlog.Log, name string) error {
	v, err := lg.View(name)
	if err != nil {
		return fmt.Errorf("chat: open store: %w", err)
	}
	switch name {
	case MessagesProjectionName:
		s.messages = v
	case StateProjectionName:
		s.state = v
	case UsageProjectionName:
		s.usage = v
	case InterruptsProjectionName:
		s.interrupts = v
	case TurnsProjectionName:
		s.turns = v
	case BudgetProjectionName:
		s.budget = v
	case ContextProjectionName:
		s.context = v
	}
	return nil
}

// OpenStore registers the chat projections on lg, each on a Projector of its
// own, and returns the Store and the projectors, which the caller runs (Run)
// and waits for (Ready) before using the Store; WaitFor then waits on the
// five projectors of the events stream. AddStore feeds them from one
// Follower instead, which a process should prefer. Call it once per Log.
func OpenStore(lg *eventlog.Log) (*Store, []*eventlog.Projector, error) {
	s, err := newStore(lg)
	if err != nil {
		return nil, nil, err
	}
	all := []*eventlog.Projector{s.chunkPr}
	for _, p := range s.eventProjections() {
		pr, err := lg.NewProjector(p)
		if err != nil {
			return nil, nil, fmt.Errorf("chat: open store: %w", err)
		}
		if err := s.setView(lg, p.Name); err != nil {
			return nil, nil, err
		}
		all = append(all, pr)
		s.eventPrs = append(s.eventPrs, pr)
	}
	return s, all, nil
}

// WaitReady blocks until every projection has caught up with the log as it
// was when its projector started, or ctx is done.
func (s *Store) WaitReady(ctx context.Context) error {
	for _, pr := range append([]waiter{s.chunkPr}, s.eventPrs...) {
		select {
		case <-pr.Ready():
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// WaitFor blocks until every projection of the events stream (messages,
// state, usage, interrupts, turns) has applied sequence seq of the events
// stream: read-your-writes after an append. With AddStore that is one
// cursor, the Follower's.
func (s *Store) WaitFor(ctx context.Context, seq eventlog.Seq) error {
	for _, pr := range s.eventPrs {
		if err := pr.WaitFor(ctx, seq); err != nil {
			return err
		}
	}
	return nil
}

// WaitForChunks blocks until the stream metadata projection has applied
// sequence seq of the chunks stream.
func (s *Store) WaitForChunks(ctx context.Context, seq eventlog.Seq) error {
	return s.chunkPr.WaitFor(ctx, seq)
}

// Streams returns the stream metadata reader.
func (s *Store) Streams() *chunk.Streams { return s.streams }

// Page selects messages: those after the message with id After ("" for the
// first), at most Limit of them (0 for all).
type Page struct {
	After string
	Limit int
	// Inline, when positive, leaves a payload stored by reference of more
	// than Inline bytes as its reference (Part.Blobs): a page that must
	// fit one reply. Zero: every payload is read back.
	Inline int64 `json:"-"`
}

// Messages returns a page of agent's visible conversation (hidden messages
// are skipped), oldest first, and the After of the next page ("" when this
// page reaches the end). An After id not in the conversation is ErrNotFound.
// The caller owns the slice.
func (s *Store) Messages(agent string, p Page) ([]Message, string, error) {
	var start uint64
	if p.After != "" {
		idx, ok, err := messageIndex(s.messages, agent, p.After)
		if err != nil {
			return nil, "", err
		}
		if !ok {
			return nil, "", fmt.Errorf("%w: unknown cursor %q: no message of agent %s has that id (after takes a message id, such as a page's next)", ErrNotFound, p.After, agent)
		}
		start = idx + 1
	}
	next, err := nextIndex(s.messages, agent)
	if err != nil {
		return nil, "", err
	}
	var out []Message
	for i := start; i < next; i++ {
		m, _, ok, err := getMessage(s.messages, agent, i)
		if err != nil {
			return out, "", err
		}
		if !ok || m.Hidden {
			continue
		}
		if p.Limit > 0 && len(out) == p.Limit {
			return out, out[len(out)-1].ID, nil
		}
		if m, err = s.resolve(m, p.Inline); err != nil {
			return out, "", err
		}
		out = append(out, m)
	}
	return out, "", nil
}

// History returns agent's whole conversation, hidden messages included, as
// the provider sees it. The caller owns the slice and each message's Parts
// slice; the parts' bytes (Input, Output) are shared with the Store's
// history cache and only read. A row is decoded only when its bytes
// differ from the ones the cache decoded (historycache.go), so the History
// before every model call decodes the messages new since the last one.
func (s *Store) History(agent string) ([]Message, error) {
	return s.history(agent, s.hist, false)
}

// historyShared is History for a caller that only reads the messages, as
// the turn's model call does (request, modelInput, toLLM): their Parts
// slices are the history cache's own, not copies. Copying every message's
// parts before every model call was a fifth of History's cost. A caller
// that hands the messages on to code of others (Config.Summarize) copies
// them first (cloneParts).
func (s *Store) historyShared(agent string) ([]Message, error) {
	return s.history(agent, s.hist, true)
}

// cloneParts returns msgs with each message's Parts slice copied.
func cloneParts(msgs []Message) []Message {
	out := make([]Message, len(msgs))
	for i, m := range msgs {
		m.Parts = slices.Clone(m.Parts)
		out[i] = m
	}
	return out
}

// history is History through cache c (nil: every row decoded); shared
// leaves the cached messages' Parts slices uncopied (historyShared).
func (s *Store) history(agent string, c *historyCache, shared bool) ([]Message, error) {
	next, err := nextIndex(s.messages, agent)
	if err != nil {
		return nil, err
	}
	// The agent's own rows through one iterator, in index order: a Get a
	// message cost a Pebble iterator each, before every model call. An
	// index without a row of its own (a fork's inherited message) and a
	// message stored in pieces are read as Message reads them.
	var cached, fresh []cachedRow
	if c != nil {
		cached = c.get(agent)
		fresh = make([]cachedRow, next)
	}
	own, err := ownRows(s.messages, agent, next, cached)
	if err != nil {
		return nil, err
	}
	out := make([]Message, 0, next)
	for i := range next {
		var m Message
		raw := own[i]
		ok := raw != nil
		if hit, found := lookup(cached, i, raw); ok && found {
			m = hit
			c.hits.Add(1)
			fresh[i] = cachedRow{raw: cached[i].raw, m: hit}
			if !shared {
				m.Parts = slices.Clone(m.Parts)
			}
		} else if ok {
			var row messageRow
			if err := json.Unmarshal(raw, &row); err != nil {
				return out, corrupt("chat row "+string(msgKey(agent, i)), err)
			}
			m = row.Message
			if row.Pieces > 0 {
				m, _, ok, err = getOwnMessage(s.messages, agent, i)
			} else if fresh != nil {
				fresh[i] = cachedRow{raw: raw, m: m}
				if !shared {
					m.Parts = slices.Clone(m.Parts)
				}
			}
		} else {
			m, _, ok, err = getMessage(s.messages, agent, i)
		}
		if err != nil {
			return out, err
		}
		if ok {
			if m, err = s.resolve(m, 0); err != nil {
				return out, err
			}
			out = append(out, m)
		}
	}
	if c != nil {
		c.put(agent, fresh)
	}
	return out, nil
}

// ownRows returns the raw rows of agent's own messages below next, at
// their index (nil where agent has none), read with one scan. A row whose
// bytes equal the cached row at its index is returned as the cached
// slice itself, not copied: the rows before every model call are mostly
// the ones the cache holds, and copying each out of Pebble cost more than
// comparing it in place.
func ownRows(v *eventlog.View, agent string, next uint64, cached []cachedRow) ([][]byte, error) {
	prefix := msgKey(agent, 0)
	prefix = prefix[:len(prefix)-8]
	rows := make([][]byte, next)
	var bad error
	err := v.ScanSeek(prefix, func(kv eventlog.KV) ([]byte, bool) {
		suffix := kv.Key[len(prefix):]
		if len(suffix) != 8 {
			bad = corrupt("chat row "+string(kv.Key), errors.New("want an 8-byte index"))
			return nil, true
		}
		idx, _ := decodeIndex(suffix)
		if idx >= next {
			return nil, true
		}
		if idx < uint64(len(cached)) && cached[idx].raw != nil && bytes.Equal(cached[idx].raw, kv.Value) {
			rows[idx] = cached[idx].raw
		} else {
			rows[idx] = bytes.Clone(kv.Value) // kv is only valid during the call
		}
		return nil, false
	})
	if err != nil {
		return nil, err
	}
	if bad != nil {
		return nil, bad
	}
	return rows, nil
}

// Message returns one message by id, or ErrNotFound.
func (s *Store) Message(agent, id string) (Message, error) {
	idx, ok, err := messageIndex(s.messages, agent, id)
	if err != nil {
		return Message{}, err
	}
	if ok {
		m, _, ok, err := getMessage(s.messages, agent, idx)
		if err != nil {
			return m, err
		}
		if ok {
			return s.resolve(m, 0)
		}
	}
	return Message{}, fmt.Errorf("%w: message %q of agent %s", ErrNotFound, id, agent)
}

// State returns agent's state value and version (nil and 0 before the first
// SetState).
func (s *Store) State(agent string) (json.RawMessage, int, error) {
	var st stateSet
	if _, err := getJSON(s.state, stateKey(agent), &st); err != nil {
		return nil, 0, err
	}
	return st.Value, st.Version, nil
}

// Usage returns agent's usage roll-up.
func (s *Store) Usage(agent string) (Usage, error) {
	var u Usage
	_, err := getJSON(s.usage, usageKey(agent), &u)
	return u, err
}

// Interrupted reports whether agent's interrupt flag name is set: every
// set that a WaitFor of its sequence confirmed (SetInterrupt returned) is
// seen. A flag read unset is not read again until a flag may have been set
// since (interruptflags.go).
func (s *Store) Interrupted(agent, name string) (bool, error) {
	g := s.flags.gen.Load()
	if s.flags.knownUnset(agent, name, g) {
		return false, nil
	}
	_, err := s.interrupts.Get(interruptKey(agent, name))
	if isNotFound(err) {
		s.flags.readUnset(agent, name, g)
		return false, nil
	}
	return err == nil, err
}

// Turn returns one turn by request id, or ErrNotFound.
func (s *Store) Turn(agent, requestID string) (TurnInfo, error) {
	var t TurnInfo
	ok, err := getJSON(s.turns, turnKey(agent, requestID), &t)
	if err == nil && !ok {
		err = fmt.Errorf("%w: turn %q of agent %s", ErrNotFound, requestID, agent)
	}
	if err == nil {
		t, err = s.resolveTurn(t)
	}
	return t, err
}

// ActiveTurn returns agent's turn that has started and not ended, if any.
func (s *Store) ActiveTurn(agent string) (TurnInfo, bool, error) {
	return s.turnAt(agent, activeTurnKey(agent))
}

// LastTurn returns agent's most recently started turn, if any.
func (s *Store) LastTurn(agent string) (TurnInfo, bool, error) {
	return s.turnAt(agent, lastTurnKey(agent))
}

func (s *Store) turnAt(agent string, key []byte) (TurnInfo, bool, error) {
	id, err := s.turns.Get(key)
	if isNotFound(err) {
		return TurnInfo{}, false, nil
	}
	if err != nil {
		return TurnInfo{}, false, err
	}
	t, err := s.Turn(agent, string(id))
	return t, err == nil, err
}

// LastMessageID returns the id of agent's last visible message, "" when
// its conversation has none.
func (s *Store) LastMessageID(agent string) (string, error) {
	next, err := nextIndex(s.messages, agent)
	if err != nil {
		return "", err
	}
	for i := next; i > 0; i-- {
		var head messageHead // a whole message's row decodes into it too
		ok, err := getJSON(s.messages, msgKey(agent, i-1), &head)
		if err != nil {
			return "", err
		}
		if ok && !head.Hidden {
			return head.ID, nil
		}
	}
	return "", nil
}
