package host

import (
	"context"
	"encoding/json"
)

// handler runs one command and returns its reply as JSON: the shape of
// every stage of the command path. A reply is JSON from dispatch on,
// whether the command ran here or on another node, so the edges (NATS,
// HTTP, an agent's Env.Command) take one type.
type handler func(ctx context.Context, cmd Command) (json.RawMessage, error)

// stage is one step of the command path: it does its part and hands the
// command to next, or answers it itself (a refusal, a forward).
type stage func(next handler) handler

// chain composes stages so that the first runs first: chain(a, b)(h) is
// a(b(h)).
func chain(stages ...stage) stage {
	return func(next handler) handler {
		for i := len(stages) - 1; i >= 0; i-- {
			next = stages[i](next)
		}
		return next
	}
}

// Command runs a command for an agent and returns its reply, down the
// command path (pipeline.go): access, route, dispatch. status, fibers
// and schedules are answered by the host from the projections without
// activating the agent (status adds the agent's own answer when it is
// active and handles "status"); other verbs activate the agent and go to its
// CommandHandler.
//
// Errors wrap ErrBadRequest, ErrNotFound, ErrConflict or ErrTooLarge where
// the caller can act on them; StatusCode maps them to codes.
func (h *Host) Command(ctx context.Context, cmd Command) (json.RawMessage, error) {
	return h.path.command(ctx, cmd)
}

// path is the command path, built once (New) by buildPath.
type path struct {
	// command is what Host.Command runs: a command from a client (the
	// NATS edge, HTTP), or an agent (Env.Command).
	command handler
	// local is the owner's part of it (owned, then dispatch): a command
	// routed here, or forwarded by another node (answerForwarded).
	local handler
}

// buildPath builds the command path, top to bottom. A NATS command
// reaches it through the edge (stage_edge.go: admit, serveCommand); an
// HTTP request (ServeCommand, the chat gateway) and an agent's
// Env.Command enter at the top, as Host.Command.
func (h *Host) buildPath() {
	h.path.local = h.owned(h.dispatch) // stage_route.go, stage_dispatch.go
	h.path.command = chain(
		h.audited,       // stage_access.go: the outcome to the audit
		h.checked,       // stage_access.go: agent id of a type, JSON payload
		h.roleChecked,   // stage_access.go: the identity's role allows the verb
		h.quotaAdmitted, // stage_access.go: the tenant's quotas
		h.routed,        // stage_route.go: here, forwarded to the owner, or once there is one
	)(h.dispatch) // stage_dispatch.go: the host's verbs, then the type's
}
