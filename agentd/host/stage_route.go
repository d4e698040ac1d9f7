package host

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/forever-agents/forever/auth"
	"github.com/forever-agents/forever/eventlog"
)

// Route is the third stage of the command path (pipeline.go): where the
// command runs. A verb that runs anywhere (runsAnywhere) runs here; any
// other runs on its agent's owner, which a fork's is the new agent's
// (routeCommand): here (local: owned, then dispatch), forwarded to the
// owner's node (route.go: forward; the owner answers it with local,
// answerForwarded), or once an owner took the partition (route: at most
// handoffWait, then 503).

// runsAnywhere reports whether verb runs on whichever node took the
// command: the log is read from the log itself, which every node reads,
// and the agent is not activated.
func runsAnywhere(verb string) bool { return verb == "log" }

// routed is the route stage: next is dispatch, reached here at once for
// a verb that runs anywhere, or on the owner through route and local.
func (h *Host) routed(next handler) handler {
	return func(ctx context.Context, cmd Command) (json.RawMessage, error) {
		if runsAnywhere(cmd.Verb) {
			return next(ctx, cmd)
		}
		return h.routeCommand(ctx, cmd)
	}
}

// routeCommand routes cmd to the owner of its agent; a fork goes to the
// owner of the new agent.
func (h *Host) routeCommand(ctx context.Context, cmd Command) (json.RawMessage, error) {
	if cmd.Verb != "fork" {
		return h.route(ctx, cmd)
	}
	var req ForkRequest
	if err := decodePayload(cmd.Data, &req); err != nil {
		return nil, err
	}
	if req.To == "" {
		return nil, ErrBadRequest.Wrapf("fork: the payload's to names the new agent's id, and it is missing")
	}
	typ, err := h.TypeOf(req.To)
	if err != nil {
		return nil, err
	}
	if req.To == cmd.Agent {
		return nil, ErrBadRequest.Wrapf("fork: to is the parent's own id %q; a fork needs a new agent id", req.To)
	}
	if ptyp, _ := h.TypeOf(cmd.Agent); ptyp != typ {
		return nil, ErrBadRequest.Wrapf("fork: %q is an agent of type %s and %q of type %s; a fork has its parent's type", cmd.Agent, ptyp, req.To, typ)
	}
	data, err := json.Marshal(forkOrder{Parent: cmd.Agent, At: req.At})
	if err != nil {
		return nil, err
	}
	return h.route(ctx, Command{Agent: req.To, Verb: "fork", Data: data, RequestID: cmd.RequestID})
}

// route runs cmd on the node that owns the agent: here, or forwarded.
func (h *Host) route(ctx context.Context, cmd Command) (json.RawMessage, error) {
	deadline := time.Now().Add(handoffWait)
	p := h.partitionOf(cmd.Agent)
	for attempt := 0; ; attempt++ {
		var err error
		var out json.RawMessage
		owner, known := h.own.Owner(p)
		if !h.ownsPartition(p) && (!known || !slices.Contains(h.own.Nodes(), owner.Node)) {
			// The cache says nobody, or a node that left: during a
			// handoff the lease bucket's watcher can lag seconds behind
			// (its stream changes leader), so ask the server.
			if l, ok, err := h.own.Lookup(ctx, p); err == nil {
				owner, known = l, ok
			}
		}
		switch {
		case h.ownsPartition(p):
			out, err = h.local(ctx, cmd)
		case known && owner.Node != h.own.Node() && slices.Contains(h.own.Nodes(), owner.Node):
			out, err = h.forward(ctx, owner.Node, cmd)
		case known && owner.Node != h.own.Node():
			// The owner's node key is gone: it is handing off (SIGTERM) or
			// dead. A forward could hang on a draining connection; wait for
			// the partition's next owner instead, as between owners.
			err = fmt.Errorf("%w: owner %s of partition %d is leaving", eventlog.ErrNotOwner, owner.Node, p)
		default:
			err = h.notOwner(cmd.Agent, p)
		}
		if err == nil || !retryable(err) {
			return out, err
		}
		if time.Now().After(deadline) {
			return nil, ErrUnavailable.Wrapf("no node took partition %d of agent %q within %s: %v", p, cmd.Agent, handoffWait, err)
		}
		t := time.NewTimer(routeBackoff)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, ErrUnavailable.Wrapf("%w (waiting for the owner of partition %d)", ctx.Err(), p)
		}
	}
}

// owned runs cmd with next on this node, which must own the agent's
// partition (otherwise it fails with a retryable 503): the owner's side
// of the route, for a command routed here or forwarded by another node.
// A partition just taken is served once its recovery started
// (awaitRecovered): its views then hold its events.
//
// While this node's JetStream store is full (agentd.Daemon.ServerStoreFull) a
// command that writes (a write or an approve; not a read, and not an
// admin's delete, which frees space) is refused at once with the full
// store's 503: in a cluster every file stream loses its leader then, and
// its append would wait for one until the command's timeout.
func (h *Host) owned(next handler) handler {
	return func(ctx context.Context, cmd Command) (json.RawMessage, error) {
		if err := h.awaitRecovered(ctx, cmd.Agent); err != nil {
			return nil, err
		}
		if a := auth.VerbAccess(cmd.Verb); a == auth.AccessWrite || a == auth.AccessApprove {
			if full := h.daemon.ServerStoreFull(); full != nil {
				return nil, full
			}
		}
		out, err := next(ctx, cmd)
		if err != nil && eventlog.Unavailable(err) {
			// A stream without a leader because the store is full (a
			// cluster's followers drop what they cannot store): say why.
			if full := h.daemon.StoreFull(); full != nil {
				err = fmt.Errorf("%w: %w", full, err)
			}
		}
		return out, err
	}
}

// local runs cmd on this node, which must own the agent's partition
// (owned, then dispatch): route's "here", and every forwarded command.
func (h *Host) local(ctx context.Context, cmd Command) (json.RawMessage, error) {
	return h.path.local(ctx, cmd)
}

// awaitRecovered waits until this node's views caught up the partition of
// agent and its recovery started (awaitPartition), so a command sees
// every event the previous owner stored: with owned views a partition just
// taken is caught up from the rows and cursor this node kept (none the
// first time), and a read of its views before that answered with what
// they held, an empty conversation in TestUpgrade. It fails with a
// retryable 503 when this node does not own the partition, or loses it
// meanwhile, and with a 503 when ctx ends first.
func (h *Host) awaitRecovered(ctx context.Context, agent string) error {
	p := h.partitionOf(agent)
	owned, err := h.awaitPartition(ctx, p)
	if !owned {
		return h.notOwner(agent, p)
	}
	return err
}
