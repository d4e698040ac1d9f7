package chat

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"strings"

	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/fiber"
)

// The queue of an agent (MultitaskEnqueue) is kept in the turns view:
//
//	turns: w\0<agent>\0<seq>        turn.started JSON of a queued message, seq
//	                                 (8 bytes BE) its queue fiber's fiber.started
//	       v\0<agent>\0<requestId>  seq of the queued message of request requestId
//	       y\0<agent>\0<fiberId>    request id of a queue fiber
//
// A queued message leaves the queue when its turn.started is applied, or
// when its queue fiber ends (it then could not start its turn).
func queueKey(agent string, seq eventlog.Seq) []byte {
	return binary.BigEndian.AppendUint64([]byte("w\x00"+agent+"\x00"), uint64(seq))
}
func queueReqKey(agent, req string) []byte  { return []byte("v\x00" + agent + "\x00" + req) }
func queueFiberKey(agent, id string) []byte { return []byte("y\x00" + agent + "\x00" + id) }
func queuePrefix(agent string) []byte       { return []byte("w\x00" + agent + "\x00") }

// queueFiberEvent is the part of fiber events the queue reads.
type queueFiberEvent struct {
	ID       string          `json:"id"`
	Name     string          `json:"name"`
	Snapshot json.RawMessage `json:"snapshot"`
}

// applyQueue applies a fiber event to the queue: a queue fiber's start
// adds its message, its end removes it.
func applyQueue(b *eventlog.Batch, e eventlog.Event) error {
	var fe queueFiberEvent
	if !decodeData(e, &fe) || fe.ID == "" {
		return nil
	}
	if e.Type == fiber.EventStarted {
		req, ok := strings.CutPrefix(fe.Name, QueueFiberPrefix)
		if !ok || req == "" {
			return nil
		}
		var t turnStarted
		if json.Unmarshal(fe.Snapshot, &t) != nil || t.RequestID != req || t.Message == nil {
			return nil
		}
		if err := b.Set(queueKey(e.Agent, e.Seq), fe.Snapshot); err != nil {
			return err
		}
		if err := b.Set(queueReqKey(e.Agent, req), encodeIndex(uint64(e.Seq))); err != nil {
			return err
		}
		return b.Set(queueFiberKey(e.Agent, fe.ID), []byte(req))
	}
	if e.Type == fiber.EventRecovered {
		return nil
	}
	req, err := b.Get(queueFiberKey(e.Agent, fe.ID))
	if isNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if err := b.Delete(queueFiberKey(e.Agent, fe.ID)); err != nil {
		return err
	}
	return dequeue(b, e.Agent, string(req))
}

// dequeue takes request req's message out of the agent's queue, if there.
func dequeue(b *eventlog.Batch, agent, req string) error {
	raw, err := b.Get(queueReqKey(agent, req))
	if isNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	seq, ok := decodeIndex(raw)
	if !ok {
		return corrupt("queue index of "+req, errors.New("want 8 bytes"))
	}
	if err := b.Delete(queueReqKey(agent, req)); err != nil {
		return err
	}
	return b.Delete(queueKey(agent, eventlog.Seq(seq)))
}

// Queue returns the agent's queued messages' turns (MultitaskEnqueue), in
// the order they were queued.
func (s *Store) Queue(agent string) ([]turnStarted, error) {
	var out []turnStarted
	for kv, err := range s.turns.Scan(queuePrefix(agent)) {
		if err != nil {
			return nil, err
		}
		var t turnStarted
		if err := json.Unmarshal(kv.Value, &t); err != nil {
			return nil, corrupt("queued turn", err)
		}
		out = append(out, t)
	}
	return out, nil
}

// queueHead returns the first queued message's turn.
func (s *Store) queueHead(agent string) (turnStarted, bool, error) {
	for kv, err := range s.turns.Scan(queuePrefix(agent)) {
		if err != nil {
			return turnStarted{}, false, err
		}
		var t turnStarted
		if err := json.Unmarshal(kv.Value, &t); err != nil {
			return turnStarted{}, false, corrupt("queued turn", err)
		}
		return t, true, nil
	}
	return turnStarted{}, false, nil
}
