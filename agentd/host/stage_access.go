package host

import (
	"context"
	"encoding/json"

	"github.com/forever-agents/forever/auth"
)

// Access is the second stage of the command path (pipeline.go), after
// the edge: who may send the command, and what it costs the tenant.

// audited hands the command's outcome, whatever stage refused it or ran
// it, to the audit (audit).
func (h *Host) audited(next handler) handler {
	return func(ctx context.Context, cmd Command) (out json.RawMessage, err error) {
		defer func() { h.audit(ctx, cmd, err) }()
		return next(ctx, cmd)
	}
}

// checked refuses a command for an agent id no type claims (404, or 400
// for an id that is not one) or with a payload that is not JSON (400).
func (h *Host) checked(next handler) handler {
	return func(ctx context.Context, cmd Command) (json.RawMessage, error) {
		if _, err := h.TypeOf(cmd.Agent); err != nil {
			return nil, err
		}
		if len(cmd.Data) > 0 && !json.Valid(cmd.Data) {
			return nil, ErrBadRequest.Wrapf("command %s: payload is not valid JSON", cmd.Verb)
		}
		return next(ctx, cmd)
	}
}

// roleChecked refuses a command its identity's role may not send
// (checkRole): 403.
func (h *Host) roleChecked(next handler) handler {
	return func(ctx context.Context, cmd Command) (json.RawMessage, error) {
		if err := checkRole(ctx, cmd.Verb); err != nil {
			return nil, err
		}
		return next(ctx, cmd)
	}
}

// quotaAdmitted holds a command to the tenant's quotas, on a daemon with
// quotas: a write past the bytes or agents quota is refused (429) before
// it runs (a read never counts), and the server's refusal of a write over
// the account's storage becomes the bytes quota's error.
func (h *Host) quotaAdmitted(next handler) handler {
	return func(ctx context.Context, cmd Command) (json.RawMessage, error) {
		if h.quotas == nil {
			return next(ctx, cmd)
		}
		if err := h.quotas.Admit(ctx, quotaAgent(cmd), cmd.Verb, len(cmd.Data)); err != nil {
			return nil, err
		}
		out, err := next(ctx, cmd)
		return out, h.quotas.OverStorage(err)
	}
}

// checkRole refuses a command whose request carries an identity (an HTTP
// request through the tenants' front door) whose role may not send verb.
// An approver's chat is let through: the chat type lets it answer
// approvals only. A command without an identity came over NATS, where the
// server enforced the credential's permissions.
func checkRole(ctx context.Context, verb string) error {
	id, ok := auth.IdentityFrom(ctx)
	if !ok || id.Role.Allows(verb) || (verb == "chat" && id.Role == auth.RoleApprover) {
		return nil
	}
	return ErrForbidden.Wrapf("credential %s (role %s) may not send %s", id.Cred, id.Role, verb)
}

// audit hands a command that may change an agent, and its outcome, to
// Config.AuditCommand: every verb but the reads (auth.IsRead), state
// without a value and budget without limits (both read).
func (h *Host) audit(ctx context.Context, cmd Command, err error) {
	if h.deps == nil || h.deps.Config.AuditCommand == nil || auth.IsRead(cmd.Verb) {
		return
	}
	if cmd.Verb == "state" {
		var req struct {
			Value json.RawMessage `json:"value"`
		}
		if json.Unmarshal(cmd.Data, &req) != nil || len(req.Value) == 0 || string(req.Value) == "null" {
			return
		}
	}
	if cmd.Verb == "budget" {
		var req map[string]json.RawMessage
		if json.Unmarshal(cmd.Data, &req) != nil || len(req) == 0 {
			return
		}
	}
	h.deps.Config.AuditCommand(ctx, cmd.Agent, cmd.Verb, err)
}
