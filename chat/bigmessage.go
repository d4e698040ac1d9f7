package chat

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/forever-agents/forever/eventlog"
)

// EventMessagePart carries one part of a message event too large for one
// event of the server: the event's data (message.appended or
// message.updated), split into Parts slices appended in order, as one
// atomic batch where the log takes batches. The messages view applies the
// whole event once its last part arrives.
const EventMessagePart = "message.part" // {id, type, part, parts, b}

// MaxMessageParts caps the events one message event may be split into
// (about 48 MiB of message at the default 1 MiB max payload). An assistant
// message larger than that ends its turn with an error chunk (ErrTooLarge).
const MaxMessageParts = 64

// messagePart is the data of EventMessagePart.
type messagePart struct {
	// ID is the message's id; Type the event the parts make up.
	ID    string `json:"id"`
	Type  string `json:"type"`
	Part  int    `json:"part"`
	Parts int    `json:"parts"`
	// Bytes is this part's slice of the event's JSON data (base64 in JSON).
	Bytes []byte `json:"b"`
}

// batchLog is the optional capability of a Log to append events as one
// atomic batch (*eventlog.Log and *eventlog.Writer have it).
type batchLog interface {
	AppendBatch(ctx context.Context, evs []eventlog.Event, opts ...eventlog.AppendOpt) (eventlog.Seq, error)
}

// messageEvents encodes a message event (typ is message.appended or
// message.updated, about message id) as the events that store it: the event
// itself when it fits one event, or its message.part events. More than
// MaxMessageParts is ErrTooLarge. With Config.Blobs, a part's payload over
// Config.BlobThreshold is stored first (durable before the event that
// names it) and the event holds its reference (blobref.go), so only a
// message of many payloads each under the threshold is split.
func (a *Agent) messageEvents(typ, id string, v any) ([]eventlog.Event, error) {
	v, err := a.offloadMessageEvent(v)
	if err != nil {
		return nil, err
	}
	e, err := eventlog.NewEvent(a.agent, typ, v)
	if err != nil {
		return nil, err
	}
	limit := a.dataLimit()
	if int64(len(e.Data)) <= limit {
		return []eventlog.Event{e}, nil
	}
	// base64 grows 4/3; leave room for the part's other fields.
	per := int((limit-256-int64(len(id))-int64(len(typ)))*3/4) &^ 3
	if per <= 0 {
		return nil, fmt.Errorf("%w: %s of %d bytes: the server's max payload %d leaves no room for parts: %w",
			ErrTooLarge, typ, len(e.Data), a.cfg.MaxPayload, eventlog.ErrTooLarge)
	}
	n := (len(e.Data) + per - 1) / per
	if n > MaxMessageParts {
		return nil, fmt.Errorf("%w: %s of %d bytes needs %d events, at most %d are stored (server max payload %d): %w",
			ErrTooLarge, typ, len(e.Data), n, MaxMessageParts, a.cfg.MaxPayload, eventlog.ErrTooLarge)
	}
	evs := make([]eventlog.Event, 0, n)
	for k := range n {
		p := messagePart{ID: id, Type: typ, Part: k, Parts: n, Bytes: e.Data[k*per : min((k+1)*per, len(e.Data))]}
		pe, err := eventlog.NewEvent(a.agent, EventMessagePart, p)
		if err != nil {
			return nil, err
		}
		evs = append(evs, pe)
	}
	return evs, nil
}

// appendMessage appends a message event about message id (see
// messageEvents), split into parts when it does not fit one event, and
// waits for the store to apply it.
func (a *Agent) appendMessage(ctx context.Context, typ, id string, v any) error {
	evs, err := a.messageEvents(typ, id, v)
	if err != nil {
		return err
	}
	return a.appendMessageEvents(ctx, evs)
}

// appendMessageEvents appends what messageEvents returned: one event, or
// a set of parts in one atomic batch where the log takes batches.
func (a *Agent) appendMessageEvents(ctx context.Context, evs []eventlog.Event) error {
	if len(evs) == 1 {
		_, err := a.appendAll(ctx, evs)
		return err
	}
	typ := evs[0].Type
	var seq eventlog.Seq
	var err error
	if bl, ok := a.log.(batchLog); ok {
		seq, err = bl.AppendBatch(ctx, evs)
	} else {
		seq, err = a.appendEach(ctx, evs)
	}
	if err != nil {
		return fmt.Errorf("chat: append %s in %d parts: %w", typ, len(evs), err)
	}
	return a.store.WaitFor(ctx, seq)
}

// chainLog is the part of *eventlog.Log that appends several events of
// an agent at about the cost of one.
type chainLog interface {
	AppendAll(ctx context.Context, evs []eventlog.Event, opts ...eventlog.AppendOpt) (eventlog.Seq, error)
}

// appendAll appends evs, the agent's events, in order, waits until the
// views show them, and returns the last one's sequence: in one chain where
// the log takes one (eventlog.Log's AppendAll: one round trip, and a
// failure leaves a prefix), else one by one. Each event must be one a
// retry or a recovery can tell is stored.
func (a *Agent) appendAll(ctx context.Context, evs []eventlog.Event) (eventlog.Seq, error) {
	var seq eventlog.Seq
	var err error
	if cl, ok := a.log.(chainLog); ok {
		seq, err = cl.AppendAll(ctx, evs)
	} else {
		seq, err = a.appendEach(ctx, evs)
	}
	if errors.Is(err, eventlog.ErrTooLarge) {
		err = fmt.Errorf("%w: %w", ErrTooLarge, err)
	}
	switch {
	case err != nil && len(evs) == 1:
		return 0, fmt.Errorf("chat: append %s: %w", evs[0].Type, err)
	case err != nil:
		return 0, fmt.Errorf("chat: append %s and %d more events: %w", evs[0].Type, len(evs)-1, err)
	}
	return seq, a.store.WaitFor(ctx, seq)
}

// appendEach appends evs one by one, up to the first error, and returns
// the last sequence stored. A set of message parts cut short is never
// applied, and the next attempt writes a whole set again (part 0 starts
// over).
func (a *Agent) appendEach(ctx context.Context, evs []eventlog.Event) (eventlog.Seq, error) {
	var seq eventlog.Seq
	for _, e := range evs {
		s, err := a.log.Append(ctx, e)
		if err != nil {
			return seq, err
		}
		seq = s
	}
	return seq, nil
}

// Message rows in the messages view: a message whose JSON is over
// rowPieceMax is stored as a head row (its id, role, request id, hidden
// flag and the number of pieces) and its JSON in pieces under the "x" tag,
// so every row stays small enough for a compaction snapshot part.
//
//	m\0<agent>\0<index>            Message JSON, or messageHead JSON
//	x\0<agent>\0<index><piece>     a piece of the Message JSON (piece 4 bytes BE)
//	q\0<agent>\0<id>\0<part>       a message.part applied while its set is incomplete
const rowPieceMax = 128 << 10

func pieceKey(agent string, idx uint64, k int) []byte {
	return binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint64([]byte("x\x00"+agent+"\x00"), idx), uint32(k))
}
func piecePrefix(agent string, idx uint64) []byte {
	return binary.BigEndian.AppendUint64([]byte("x\x00"+agent+"\x00"), idx)
}
func pendingPrefix(agent, id string) []byte { return []byte("q\x00" + agent + "\x00" + id + "\x00") }
func pendingKey(agent, id string, k int) []byte {
	return binary.BigEndian.AppendUint32(pendingPrefix(agent, id), uint32(k))
}

// messageHead is the row of a message stored in pieces.
type messageHead struct {
	ID        string `json:"id"`
	Role      string `json:"role"`
	RequestID string `json:"requestId,omitempty"`
	Hidden    bool   `json:"hidden,omitempty"`
	Pieces    int    `json:"pieces"`
}

// messageRow is what a message row decodes into: a whole Message, or a
// head (Pieces > 0).
type messageRow struct {
	Message
	Pieces int `json:"pieces,omitempty"`
}

// getOwnMessage reads the message at idx of agent's own rows, joining its
// pieces; ok is false when there is none. getMessage (fork.go) also
// resolves a fork's inherited messages.
func getOwnMessage(g getter, agent string, idx uint64) (m Message, pieces int, ok bool, err error) {
	var row messageRow
	if ok, err := getJSON(g, msgKey(agent, idx), &row); !ok || err != nil {
		return Message{}, 0, ok, err
	}
	if row.Pieces <= 0 {
		return row.Message, 0, true, nil
	}
	var buf bytes.Buffer
	for k := range row.Pieces {
		piece, err := g.Get(pieceKey(agent, idx, k))
		if err != nil {
			return Message{}, 0, false, corrupt(fmt.Sprintf("piece %d of %d of message %q of %s", k, row.Pieces, row.ID, agent), err)
		}
		buf.Write(piece)
	}
	if err := json.Unmarshal(buf.Bytes(), &m); err != nil {
		return Message{}, 0, false, corrupt(fmt.Sprintf("message %q of %s (in %d pieces)", row.ID, agent, row.Pieces), err)
	}
	return m, row.Pieces, true, nil
}

// putMessage writes m at idx; oldPieces is the number of pieces the row
// there had (0 for none), whose leftovers are removed.
func putMessage(b *eventlog.Batch, agent string, idx uint64, m Message, oldPieces int) error {
	raw, err := json.Marshal(m)
	if err != nil {
		return err
	}
	if oldPieces > 0 {
		if err := b.DeletePrefix(piecePrefix(agent, idx)); err != nil {
			return err
		}
	}
	if len(raw) <= rowPieceMax {
		return b.Set(msgKey(agent, idx), raw)
	}
	n := (len(raw) + rowPieceMax - 1) / rowPieceMax
	for k := range n {
		if err := b.Set(pieceKey(agent, idx, k), raw[k*rowPieceMax:min((k+1)*rowPieceMax, len(raw))]); err != nil {
			return err
		}
	}
	return setJSON(b, msgKey(agent, idx), messageHead{ID: m.ID, Role: m.Role, RequestID: m.RequestID, Hidden: m.Hidden, Pieces: n})
}

// deleteMessage removes the row at idx and its pieces.
func deleteMessage(b *eventlog.Batch, agent string, idx uint64, pieces int) error {
	if pieces > 0 {
		if err := b.DeletePrefix(piecePrefix(agent, idx)); err != nil {
			return err
		}
	}
	return b.Delete(msgKey(agent, idx))
}

// applyMessagePart keeps a message.part until its set is complete, then
// applies the whole event. A part out of order (its predecessor missing)
// is dropped: a set cut short by a crash is never applied, and part 0
// starts a set over.
func applyMessagePart(b *eventlog.Batch, e eventlog.Event) error {
	var p messagePart
	if !decodeData(e, &p) || p.ID == "" || p.Parts < 1 || p.Part < 0 || p.Part >= p.Parts ||
		(p.Type != EventMessageAppended && p.Type != EventMessageUpdated) {
		return nil
	}
	if p.Part == 0 {
		if err := b.DeletePrefix(pendingPrefix(e.Agent, p.ID)); err != nil {
			return err
		}
	} else if _, err := b.Get(pendingKey(e.Agent, p.ID, p.Part-1)); isNotFound(err) {
		return nil
	} else if err != nil {
		return err
	}
	if p.Part < p.Parts-1 {
		return b.Set(pendingKey(e.Agent, p.ID, p.Part), p.Bytes)
	}
	var data bytes.Buffer
	for k := range p.Part {
		piece, err := b.Get(pendingKey(e.Agent, p.ID, k))
		if err != nil {
			if isNotFound(err) {
				return nil // an incomplete set
			}
			return err
		}
		data.Write(piece)
	}
	data.Write(p.Bytes)
	if err := b.DeletePrefix(pendingPrefix(e.Agent, p.ID)); err != nil {
		return err
	}
	whole := e
	whole.Type, whole.Data = p.Type, data.Bytes()
	return applyMessages(b, whole)
}
