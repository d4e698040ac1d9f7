package agents

import (
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"slices"
	"time"

	"github.com/forever-agents/forever/chat"
	"github.com/forever-agents/forever/chat/llm"
	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/fiber"
)

// ProjectionName is the name of the view of every agent.
const ProjectionName = "agents"

// Statuses of an agent, from its events alone (never from which node has
// it in memory): the first that holds.
const (
	// StatusRunning: a fiber of the agent runs (a chat turn streams, a
	// steps fiber steps) or waits for its recovery after a crash.
	StatusRunning = "running"
	// StatusWaiting: the agent's last chat turn ended waiting for a tool
	// call's approval or a client tool's result.
	StatusWaiting = "waiting"
	// StatusFailed: the agent's last turn failed, or its last ended fiber
	// failed or was abandoned after its recovery attempts.
	StatusFailed = "failed"
	// StatusIdle: none of the above.
	StatusIdle = "idle"
)

// Keys: a/<agent> is an agent's row; u/<user>\x00<agent> and
// t/<tag>\x00<agent> index the agents by user and by tag (empty values).
// User and tags hold no control character, so \x00 ends them.
func rowKey(agent string) []byte        { return []byte("a/" + agent) }
func userKey(user, agent string) []byte { return []byte("u/" + user + "\x00" + agent) }
func tagKey(tag, agent string) []byte   { return []byte("t/" + tag + "\x00" + agent) }

// row is what the view keeps of one agent.
type row struct {
	Meta
	// MetaSet: some patch set the user context (an Initial patch does
	// nothing then).
	MetaSet bool      `json:"metaSet,omitempty"`
	Created time.Time `json:"created"`
	Last    time.Time `json:"last"`
	// Running are the ids of the agent's fibers that started and did not
	// end.
	Running []string `json:"running,omitempty"`
	Waiting bool     `json:"waiting,omitempty"`
	Failed  bool     `json:"failed,omitempty"`
	// Children are the agent's sub-agents, one per child agent id, the
	// one called last at the end; at most MaxChildren.
	Children []Child `json:"children,omitempty"`
}

// MaxChildren bounds the children a row keeps: past it, the oldest one
// that is not running is dropped (the oldest of all when every one runs).
// Ephemeral children are new agents at every call, so a parent would
// otherwise collect them without end.
const MaxChildren = 100

// child records a sub-agent link event (chat.EventSubagentStarted or
// Ended, data a chat.ChildLink) in r: the child moves to the end with the
// link's mode and status.
func (r *row) child(data json.RawMessage) {
	var l Child
	if json.Unmarshal(data, &l) != nil || l.Agent == "" {
		return
	}
	r.Children = slices.DeleteFunc(r.Children, func(c Child) bool { return c.Agent == l.Agent })
	r.Children = append(r.Children, l)
	if len(r.Children) > MaxChildren {
		i := slices.IndexFunc(r.Children, func(c Child) bool { return c.Status != chat.LinkRunning })
		r.Children = slices.Delete(r.Children, max(i, 0), max(i, 0)+1)
	}
}

func (r *row) status() string {
	switch {
	case len(r.Running) > 0:
		return StatusRunning
	case r.Waiting:
		return StatusWaiting
	case r.Failed:
		return StatusFailed
	}
	return StatusIdle
}

// indexKeys are the index rows of r for agent.
func (r *row) indexKeys(agent string) [][]byte {
	var keys [][]byte
	if r.User != "" {
		keys = append(keys, userKey(r.User, agent))
	}
	for _, t := range r.Tags {
		keys = append(keys, tagKey(t, agent))
	}
	return keys
}

// Projection returns the view of every agent: per agent its user context
// (EventMeta), created and last activity times (its first and latest
// event), what its status derives from (running fibers, the outcome of
// its last turn), and its sub-agents (chat's link events); with indexes by
// user and by tag. It reads the events
// stream; register it on the daemon's Follower (Deps.Views). It has
// AgentRows, so compaction keeps it and a deleted agent leaves it.
func Projection() eventlog.Projection {
	return eventlog.Projection{
		Name:      ProjectionName,
		Version:   2, // 2: children
		Apply:     apply,
		AgentRows: agentRows,
		// A version 1 row is a version 2 row without children.
		MigrateRows: func(_ string, from int, rows []eventlog.KV) ([]eventlog.KV, error) {
			if from != 1 {
				return nil, fmt.Errorf("agents: no migration of rows of version %d", from)
			}
			return rows, nil
		},
	}
}

// agentRows yields the agent's row and its index rows.
func agentRows(r eventlog.Reader, agent string) iter.Seq2[eventlog.KV, error] {
	return func(yield func(eventlog.KV, error) bool) {
		raw, err := r.Get(rowKey(agent))
		if errors.Is(err, eventlog.ErrNotFound) {
			return
		}
		if err != nil {
			yield(eventlog.KV{}, err)
			return
		}
		var rw row
		if err := json.Unmarshal(raw, &rw); err != nil {
			yield(eventlog.KV{}, &eventlog.CorruptError{What: "agents row of " + agent, Err: err})
			return
		}
		keys := append([][]byte{rowKey(agent)}, rw.indexKeys(agent)...)
		for kv, err := range eventlog.Rows(r, keys, nil) {
			if !yield(kv, err) || err != nil {
				return
			}
		}
	}
}

// fiberEvent is the part of a fiber event the view reads.
type fiberEvent struct {
	ID string `json:"id"`
}

// turnEnd is the part of turn.completed the view reads.
type turnEnd struct {
	FinishReason string `json:"finishReason"`
}

// apply applies each record e stands for: an event that carries a fiber's
// end (record format 11) is itself, then the end.
func apply(b *eventlog.Batch, e eventlog.Event) error {
	return fiber.EachRecord(e, func(x eventlog.Event) error { return applyRecord(b, x) })
}

func applyRecord(b *eventlog.Batch, e eventlog.Event) error {
	if e.Type == eventlog.TypeSnapshot || e.Stream != "" {
		return nil // a snapshot's rows are in place; compaction is not activity
	}
	var rw row
	found := false
	raw, err := b.Get(rowKey(e.Agent))
	switch {
	case errors.Is(err, eventlog.ErrNotFound):
	case err != nil:
		return err
	default:
		// A row that does not decode is started again: Apply must not fail
		// on what the log holds.
		found = json.Unmarshal(raw, &rw) == nil
	}
	if !found {
		rw = row{Created: e.Time}
	}
	oldKeys := rw.indexKeys(e.Agent)
	rw.Last = e.Time
	switch e.Type {
	case EventMeta:
		var p MetaPatch
		if json.Unmarshal(e.Data, &p) == nil && !(p.Initial && rw.MetaSet) && !p.Empty() {
			rw.Meta = p.apply(rw.Meta)
			rw.MetaSet = true
		}
	case fiber.EventStarted:
		var f fiberEvent
		if json.Unmarshal(e.Data, &f) == nil && f.ID != "" && !slices.Contains(rw.Running, f.ID) {
			rw.Running = append(rw.Running, f.ID)
		}
		rw.Failed = false
	case fiber.EventCompleted, fiber.EventFailed, fiber.EventAbandoned:
		var f fiberEvent
		if json.Unmarshal(e.Data, &f) == nil {
			rw.Running = slices.DeleteFunc(rw.Running, func(id string) bool { return id == f.ID })
		}
		if e.Type != fiber.EventCompleted {
			rw.Failed = true
		}
	case chat.EventTurnStarted:
		rw.Waiting, rw.Failed = false, false
	case chat.EventTurnCompleted:
		var t turnEnd
		_ = json.Unmarshal(e.Data, &t)
		rw.Waiting = t.FinishReason == llm.FinishToolCalls
	case chat.EventTurnFailed:
		rw.Failed = true
	case chat.EventSubagentStarted, chat.EventSubagentEnded:
		rw.child(e.Data)
	}
	if len(rw.Running) == 0 {
		rw.Running = nil
	}
	newKeys := rw.indexKeys(e.Agent)
	for _, k := range oldKeys {
		if !slices.ContainsFunc(newKeys, func(n []byte) bool { return string(n) == string(k) }) {
			if err := b.Delete(k); err != nil {
				return err
			}
		}
	}
	for _, k := range newKeys {
		if !slices.ContainsFunc(oldKeys, func(o []byte) bool { return string(o) == string(k) }) {
			if err := b.Set(k, nil); err != nil {
				return err
			}
		}
	}
	out, err := json.Marshal(&rw)
	if err != nil {
		return err
	}
	return b.Set(rowKey(e.Agent), out)
}
