package verify

import (
	"encoding/json"
	"fmt"

	"github.com/forever-agents/forever/chat"
	"github.com/forever-agents/forever/eventlog"
)

// linkState is one sub-agent call of a parent's turn, as the parent
// recorded it (subagent.started, subagent.ended).
type linkState struct {
	req, call       string
	child, childReq string
	started, ended  int
	seq             eventlog.Seq // of the first event of the link
}

// callKey names a parent's call: agent, turn and call id.
type callKey struct{ agent, req, call string }

// childTurn is a sub-agent's turn.started, by the call that started it.
type childTurn struct {
	agent, req string
	seq        eventlog.Seq
}

// linkEvent reads one link event of the parent a.
func (c *checker) linkEvent(a *agentState, e eventlog.Event) {
	var l chat.ChildLink
	if err := json.Unmarshal(e.Data, &l); err != nil {
		c.violate(Violation{Kind: KindCorrupt, Agent: e.Agent, Seq: e.Seq,
			Text: fmt.Sprintf("%s data does not decode: %v", e.Type, err)})
		return
	}
	ls := a.link(l.ParentRequestID, l.CallID, e.Seq)
	ls.child, ls.childReq = l.Agent, l.RequestID
	if e.Type == chat.EventSubagentStarted {
		ls.started++
	} else {
		ls.ended++
	}
}

func (a *agentState) link(req, call string, seq eventlog.Seq) *linkState {
	k := req + "\x00" + call
	ls := a.links[k]
	if ls == nil {
		ls = &linkState{req: req, call: call, seq: seq}
		a.links[k] = ls
		a.linkOrder = append(a.linkOrder, k)
	}
	return ls
}

// snapshotLinks takes a snapshot's links as the history it replaced.
func (c *checker) snapshotLinks(a *agentState, links []chat.ChildLink) {
	for _, l := range links {
		ls := a.link(l.ParentRequestID, l.CallID, 0)
		if ls.started > 0 || ls.ended > 0 {
			continue
		}
		ls.child, ls.childReq, ls.started = l.Agent, l.RequestID, 1
		if l.Ended() {
			ls.ended = 1
		}
	}
}

// childTurnStarted counts a sub-agent's turn by the call that started it.
func (c *checker) childTurnStarted(agent string, e eventlog.Event, d turnData) {
	if d.Parent == nil {
		return
	}
	k := callKey{d.Parent.Agent, d.Parent.RequestID, d.Parent.CallID}
	c.childTurns[k] = append(c.childTurns[k], childTurn{agent: agent, req: d.RequestID, seq: e.Seq})
}

// finishLinks checks the links of a parent and the child turns of its
// calls.
func (c *checker) finishLinks(a *agentState) {
	for _, k := range a.linkOrder {
		ls := a.links[k]
		v := Violation{Agent: a.id, Request: ls.req, Seq: ls.seq}
		if n := len(c.childTurns[callKey{a.id, ls.req, ls.call}]); n > 1 {
			v.Kind, v.Text = KindChildTurnTwice, fmt.Sprintf("call %s started %d child turns: a sub-agent call runs its child's turn once", ls.call, n)
			c.violate(v)
		}
		if ls.ended > 1 {
			v.Kind, v.Text = KindLinkEndedTwice, fmt.Sprintf("the link of call %s to %s ended %d times", ls.call, ls.child, ls.ended)
			c.violate(v)
		}
		if ls.started == 0 && !a.compacted {
			v.Kind, v.Text = KindLinkNotStarted, fmt.Sprintf("the link of call %s to %s ended without subagent.started", ls.call, ls.child)
			c.violate(v)
			continue
		}
		if t := a.turns[ls.req]; ls.ended == 0 && t != nil && t.outcome != "" {
			v.Kind, v.Text = KindLinkOpen, fmt.Sprintf("the turn recorded %s while its call %s to %s never ended: every started link ends", t.outcome, ls.call, ls.child)
			c.violate(v)
		}
		if ch := c.agents[ls.child]; ls.started > 0 && (ch == nil || ch.turns[ls.childReq] == nil) && (ch == nil || !ch.compacted) {
			if ch != nil && ch.deleted {
				v.Kind, v.Text = KindLinkChildDeleted, fmt.Sprintf("the link of call %s names turn %s of %s, which was deleted since", ls.call, ls.childReq, ls.child)
				c.notes = append(c.notes, v)
				continue
			}
			v.Kind, v.Text = KindLinkNoChildTurn, fmt.Sprintf("the link of call %s names turn %s of %s, which is not in the log", ls.call, ls.childReq, ls.child)
			c.violate(v)
		}
	}
}
