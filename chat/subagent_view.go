package chat

import (
	"encoding/json"
	"strings"
	"time"

	"github.com/forever-agents/forever/chat/cost"
	"github.com/forever-agents/forever/eventlog"
)

// Sub-agent links live in the turns view, next to the turns they belong
// to:
//
//	turns: k\0<agent>\0<requestId>\0<callId>   ChildLink JSON
func linkKey(agent, req, callID string) []byte {
	return []byte("k\x00" + agent + "\x00" + req + "\x00" + callID)
}
func linksPrefix(agent, req string) []byte { return []byte("k\x00" + agent + "\x00" + req + "\x00") }

// applyLink applies subagent.started and subagent.ended to the link rows:
// the first started of a call creates its link, the first ended ends it
// (an ended whose started is missing creates it ended); later copies
// change nothing.
func applyLink(b *eventlog.Batch, e eventlog.Event) error {
	var l ChildLink
	if !decodeData(e, &l) || l.ParentRequestID == "" || l.CallID == "" {
		return nil
	}
	key := linkKey(e.Agent, l.ParentRequestID, l.CallID)
	var cur ChildLink
	ok, err := getJSON(b, key, &cur)
	if err != nil {
		return err
	}
	switch e.Type {
	case EventSubagentStarted:
		if ok {
			return nil
		}
		l.Status = LinkRunning
		if l.StartedAt.IsZero() {
			l.StartedAt = e.Time
		}
		l.EndedAt, l.Output, l.Error, l.Usage = time.Time{}, nil, "", nil
		return setJSON(b, key, l)
	case EventSubagentEnded:
		if ok && cur.Ended() {
			return nil
		}
		if l.EndedAt.IsZero() {
			l.EndedAt = e.Time
		}
		if !l.Ended() {
			l.Status = LinkCancelled
		}
		if ok {
			cur.Status, cur.EndedAt, cur.Output, cur.Error, cur.Usage = l.Status, l.EndedAt, l.Output, l.Error, l.Usage
			l = cur
		}
		return setJSON(b, key, l)
	}
	return nil
}

// Link returns the link of the tool call callID of agent's turn requestID.
func (s *Store) Link(agent, requestID, callID string) (ChildLink, bool, error) {
	var l ChildLink
	ok, err := getJSON(s.turns, linkKey(agent, requestID, callID), &l)
	return l, ok, err
}

// Links returns the sub-agent links of agent's turn requestID, by call id.
// The caller owns the slice.
func (s *Store) Links(agent, requestID string) ([]ChildLink, error) {
	var out []ChildLink
	for kv, err := range s.turns.Scan(linksPrefix(agent, requestID)) {
		if err != nil {
			return out, err
		}
		var l ChildLink
		if err := json.Unmarshal(kv.Value, &l); err != nil {
			return out, corrupt("link row "+strings.ReplaceAll(string(kv.Key), "\x00", "/"), err)
		}
		out = append(out, l)
	}
	return out, nil
}

// TurnUsage returns the usage recorded for agent's turn requestID: its
// own tokens and, marked apart, its sub-agents'. ok is false when none was
// recorded (the turn did not complete).
func (s *Store) TurnUsage(agent, requestID string) (TurnUsage, bool, error) {
	var u usageRecorded
	ok, err := getJSON(s.usage, usageReqKey(agent, requestID), &u)
	if err != nil || !ok {
		return TurnUsage{}, false, err
	}
	tu := TurnUsage{Input: u.Input, Output: u.Output, Cost: u.Cost}
	if u.Subagents != nil {
		tu.Subagents = *u.Subagents
	}
	return tu, true, nil
}

// TurnUsage is one turn's usage: its own model calls' tokens, and its
// sub-agents' (their turns' own and their sub-agents', recursively).
type TurnUsage struct {
	Input     int64         `json:"input"`
	Output    int64         `json:"output"`
	Subagents SubagentUsage `json:"subagents,omitzero"`
	// Cost is what Input and Output cost at the agent's price.
	Cost cost.Micros `json:"cost,omitempty"`
}

// SnapshotLinks decodes the sub-agent links in one agent snapshot part
// (eventlog.Snapshot.Views[TurnsProjectionName]): for readers of the log
// alone (package verify).
func SnapshotLinks(sv eventlog.SnapshotView) ([]ChildLink, error) {
	var out []ChildLink
	for _, kv := range sv.Rows {
		if !strings.HasPrefix(string(kv.Key), "k\x00") {
			continue
		}
		var l ChildLink
		if err := json.Unmarshal(kv.Value, &l); err != nil {
			return nil, corrupt("link row in a snapshot", err)
		}
		out = append(out, l)
	}
	return out, nil
}
