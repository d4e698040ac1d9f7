package host

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/forever-agents/forever/agents"
	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/internal/apierror"
)

// The agents view (package agents) and what the host serves from it: the
// listing (forever.list, GET /v1/agents), the meta verb, and the user
// context of an agent's first command.

// Types returns how the host tells an agent's type from its id, for the
// listing.
func (h *Host) Types() agents.Types {
	ts := agents.Types{Default: h.cfg.DefaultType}
	for name := range h.types {
		ts.Registered = append(ts.Registered, name)
	}
	slices.Sort(ts.Registered)
	return ts
}

// List returns one page of the agents q selects, from this node's agents
// view once it applied every event stored when the call began (any node
// answers with what the owners wrote). While the views are stalled (a full
// disk) it lists what they hold.
//
// Errors wrap ErrBadRequest for a bad cursor, limit or filter; else a log
// or view error.
func (h *Host) List(ctx context.Context, q agents.Query) (agents.Page, error) {
	if h.agents == nil {
		return agents.Page{}, ErrUnavailable.Wrapf("host is not running")
	}
	if h.deps.Log.OwnedViews() {
		// This node's views hold its own partitions: ask the owners.
		return h.listOwners(ctx, q)
	}
	return h.listHere(ctx, q)
}

// listHere is List from this node's agents view.
func (h *Host) listHere(ctx context.Context, q agents.Query) (agents.Page, error) {
	if h.deps.Log.Stalled() == nil {
		last, err := h.deps.Log.LastSeq(ctx, eventlog.Filter{})
		if err != nil {
			return agents.Page{}, err
		}
		if err := h.deps.Views.WaitFor(ctx, last); err != nil {
			return agents.Page{}, err
		}
	}
	if q.Version != "" {
		only, err := h.agentsOfVersion(q.Version)
		if err != nil {
			return agents.Page{}, err
		}
		q.Only = only
	}
	p, err := h.agents.List(q, h.Types())
	if errors.Is(err, agents.ErrBadCursor) || errors.Is(err, agents.ErrInvalid) {
		return p, fmt.Errorf("%w: %w", ErrBadRequest, err)
	}
	return p, err
}

// MetaRequest is the payload of the meta verb: empty (or {}) reads the
// agent's entry; otherwise an agents.MetaPatch (user, tags, metadata,
// merge) to apply first.
type MetaRequest = agents.MetaPatch

// meta answers the meta verb: the patch, if any, appended as
// agents.EventMeta, then the agent's entry once the view applied it. An
// agent with no event at all is 404 for a read.
func (h *Host) meta(ctx context.Context, cmd Command) (any, error) {
	var p agents.MetaPatch
	if err := decodePayload(cmd.Data, &p); err != nil {
		return nil, err
	}
	p.Initial = false
	if err := p.Validate(); err != nil {
		return nil, ErrBadRequest.Wrapf("meta: %s", apierror.Declared(err).Message).WithCause(err)
	}
	if !p.Empty() {
		if err := h.appendMeta(ctx, cmd.Agent, p); err != nil {
			return nil, err
		}
	}
	if err := h.catchUpViews(ctx, cmd.Agent); err != nil {
		return nil, err
	}
	e, ok, err := h.agents.Get(cmd.Agent, h.Types())
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, ErrNotFound.Wrapf("agent %q has no event yet", cmd.Agent)
	}
	return e, nil
}

// appendMeta appends p for agent, unless the agent is being deleted.
func (h *Host) appendMeta(ctx context.Context, agent string, p agents.MetaPatch) error {
	if h.isDeleting(agent) {
		return ErrConflict.Wrapf("agent %q is being deleted", agent)
	}
	e, err := eventlog.NewEvent(agent, agents.EventMeta, p)
	if err != nil {
		return err
	}
	if _, err := h.deps.Log.Writer(agent).Append(ctx, e); err != nil {
		return fmt.Errorf("meta of %s: %w", agent, err)
	}
	return nil
}

// catchUpViews waits until this node's views of the events stream applied
// agent's last event; while they are stalled it returns at once.
func (h *Host) catchUpViews(ctx context.Context, agent string) error {
	if h.deps.Log.Stalled() != nil {
		return nil
	}
	seq, err := h.deps.Log.LastSeq(ctx, eventlog.Filter{Agent: agent})
	if err != nil {
		return err
	}
	return h.deps.Views.WaitFor(ctx, seq)
}

// payloadMeta returns the "meta" of a command payload ({"meta": {user,
// tags, metadata}, ...}), nil without one. It is cheap for payloads that
// do not name it.
func payloadMeta(data json.RawMessage) (*agents.MetaPatch, error) {
	if !bytes.Contains(data, []byte(`"meta"`)) {
		return nil, nil
	}
	var p struct {
		Meta *agents.MetaPatch `json:"meta"`
	}
	if err := json.Unmarshal(data, &p); err != nil || p.Meta == nil {
		return nil, nil // the verb's own decoding reports a bad payload
	}
	p.Meta.Merge, p.Meta.Initial = false, true
	if err := p.Meta.Validate(); err != nil {
		return nil, ErrBadRequest.Wrapf("meta: %s", apierror.Declared(err).Message).WithCause(err)
	}
	if p.Meta.Empty() {
		return nil, nil
	}
	return p.Meta, nil
}

// firstMeta appends the meta of a command's payload as an Initial patch,
// once per activation, when the agent has no user context yet: it is the
// agent's first command that sets it. It runs after the command (a write:
// runLocal) succeeded, so a command refused writes nothing; the write is
// audited as the verb meta (Config.AuditCommand).
func (h *Host) firstMeta(ctx context.Context, inst *instance, p *agents.MetaPatch) error {
	if p == nil || inst.metaSet.Load() {
		return nil
	}
	if err := h.catchUpViews(ctx, inst.id); err != nil {
		return err
	}
	set, err := h.agents.MetaSet(inst.id)
	if err != nil {
		return err
	}
	if !set {
		err := h.appendMeta(ctx, inst.id, *p)
		if h.deps.Config.AuditCommand != nil {
			h.deps.Config.AuditCommand(ctx, inst.id, "meta", err)
		}
		if err != nil {
			return err
		}
	}
	inst.metaSet.Store(true)
	return nil
}

// decodePayload decodes an optional JSON payload (empty or null:
// nothing). Errors are 400s naming the field (apierror.Decode).
func decodePayload(data json.RawMessage, v any) error {
	if len(bytes.TrimSpace(data)) == 0 || string(bytes.TrimSpace(data)) == "null" {
		return nil
	}
	return apierror.Decode(data, v, apierror.Subject("the payload"))
}
