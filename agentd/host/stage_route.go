package host

import (
	"context"
	"encoding/json"
	"fmt"

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

// owned runs cmd with next on this node, which must own the agent's
// partition (otherwise it fails with a retryable 503): the owner's side
// of the route, for a command routed here or forwarded by another node.
func (h *Host) owned(next handler) handler {
	return func(ctx context.Context, cmd Command) (json.RawMessage, error) {
		if !h.Owns(cmd.Agent) {
			return nil, h.notOwner(cmd.Agent, h.partitionOf(cmd.Agent))
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
