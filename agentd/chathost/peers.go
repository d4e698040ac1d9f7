package chathost

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/forever-agents/forever/agentd/host"
	"github.com/forever-agents/forever/chat"
)

// peerTimeout bounds one command an agent sends another (a sub-agent's
// start, its cancel, a parent's notice): long enough for the routing to
// wait out an ownership change (10 s) and the owner to answer.
const peerTimeout = 30 * time.Second

// peers is chat.Peers over the host's command path (host.Env.Command):
// a sub-agent's start is the chat verb with the call's request id and
// parent, its cancel the cancel verb with the child turn's request id,
// and a child's notice the child-result verb, each routed to the agent's
// owner on whatever node. With owned views (ownedViews: this node's views
// hold only the partitions it owns) a parent reads its child's turn with
// the child-turn verb on the child's owner (chat.ChildTurnReader).
type peers struct {
	command    func(ctx context.Context, cmd host.Command) (json.RawMessage, error)
	ownedViews bool
}

var (
	_ chat.Peers           = peers{}
	_ chat.ChildTurnReader = peers{}
)

func (p peers) send(ctx context.Context, agent, verb, requestID string, v any) (json.RawMessage, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, peerTimeout)
	defer cancel()
	out, err := p.command(ctx, host.Command{Agent: agent, Verb: verb, Data: data, RequestID: requestID})
	return out, refused(err)
}

// StartChild sends the child the chat command of the call.
func (p peers) StartChild(ctx context.Context, child string, req chat.ChildRequest) (chat.Turn, error) {
	out, err := p.send(ctx, child, "chat", req.RequestID, Request{Text: req.Text, RequestID: req.RequestID, Parent: &req.Parent})
	if err != nil {
		return chat.Turn{}, err
	}
	r, ok := host.ReplyAs[Reply](out)
	if !ok || r.RequestID == "" {
		return chat.Turn{}, fmt.Errorf("%w: agent %s answered the chat command with %s", chat.ErrChildRefused, child, out)
	}
	return chat.Turn{RequestID: r.RequestID, StreamID: r.StreamID, MessageID: r.MessageID}, nil
}

// CancelChild cancels the child's turn requestID.
func (p peers) CancelChild(ctx context.Context, child, requestID string) error {
	_, err := p.send(ctx, child, "cancel", "", cancelRequest{RequestID: requestID})
	return err
}

// NotifyParent sends the parent the child-result command.
func (p peers) NotifyParent(ctx context.Context, parent string, n chat.ChildNotice) error {
	_, err := p.send(ctx, parent, "child-result", "", n)
	return err
}

// childTurnRequest is the payload of the child-turn verb.
type childTurnRequest struct {
	RequestID string `json:"requestId"`
}

// ChildTurn reads the child's turn requestID on the child's owner (the
// child-turn verb), with owned views; without them, ok is false: this
// node's views hold every agent's rows. A child whose owner is this node
// is read here through the same verb, which waits for the partition's
// recovery like every command.
func (p peers) ChildTurn(ctx context.Context, child, requestID string) (chat.TurnOutcome, bool, error) {
	if !p.ownedViews {
		return chat.TurnOutcome{}, false, nil
	}
	out, err := p.send(ctx, child, "child-turn", "", childTurnRequest{RequestID: requestID})
	if err != nil {
		return chat.TurnOutcome{}, true, err
	}
	o, ok := host.ReplyAs[chat.TurnOutcome](out)
	if !ok {
		return chat.TurnOutcome{}, true, fmt.Errorf("chathost: agent %s answered child-turn with %.200s", child, out)
	}
	return o, true, nil
}

// refused marks the errors after which a command will not run however
// often it is sent (bad input, unknown agent or verb, a conflict, too
// large) with chat.ErrChildRefused; others (503, 504, a timeout) may pass
// on a later try.
func refused(err error) error {
	switch host.StatusCode(err) {
	case http.StatusBadRequest, http.StatusNotFound, http.StatusConflict, http.StatusRequestEntityTooLarge:
		return fmt.Errorf("%w: %w", chat.ErrChildRefused, err)
	}
	return err
}

// OnDelete is the chat type's delete hook (host.SetOnDelete("chat",
// chats.OnDelete(h.Command))): a sub-agent deleted while its parent waits
// for its turn would never tell it that the turn ended, so once it is
// deleted its parent gets the child-result notice of its last turn (the
// parent reads that the turn is gone and fails the call). A notice for a
// call that ended already changes nothing; one that does not get through
// is logged, and the parent's own poll of its children finds the turn gone
// when it is active.
func (ct *Type) OnDelete(command func(ctx context.Context, cmd host.Command) (json.RawMessage, error)) host.OnDelete {
	return func(_ context.Context, agent string) (func(context.Context), error) {
		if ct.store == nil {
			return nil, host.ErrUnavailable.Wrapf("the chat views are not open yet")
		}
		t, ok, err := ct.store.LastTurn(agent)
		if err != nil || !ok || t.Parent == nil {
			return nil, err
		}
		n := chat.ChildNotice{Child: agent, RequestID: t.RequestID, ParentRequestID: t.Parent.RequestID, CallID: t.Parent.CallID}
		parent := t.Parent.Agent
		return func(ctx context.Context) {
			if err := (peers{command: command}).NotifyParent(context.WithoutCancel(ctx), parent, n); err != nil && ct.logger != nil {
				ct.logger.Warn("tell a deleted sub-agent's parent", "agent", agent, "parent", parent, "err", err)
			}
		}, nil
	}
}
