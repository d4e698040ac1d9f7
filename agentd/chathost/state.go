package chathost

import (
	"context"
	"encoding/json"
	"net/http"

	"github.com/forever-agents/forever/agentd/host"
	"github.com/forever-agents/forever/chat"
	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/internal/apierror"
)

var _ host.StateSource = (*Type)(nil)

// State reads a chat agent's current state and version (nil and 0 when it
// never set one) once this node's chat views applied the agent's last
// event: the first message of its events stream (host.AttachHTTP). While
// the views are stalled it reads what they hold.
func (ct *Type) State(ctx context.Context, agent string) (json.RawMessage, int, error) {
	if ct.store == nil {
		return nil, 0, host.ErrUnavailable.Wrapf("the chat type is not started")
	}
	if ct.log.Stalled() == nil {
		seq, err := ct.log.LastSeq(ctx, eventlog.Filter{Agent: agent})
		if err != nil {
			return nil, 0, err
		}
		if err := ct.store.WaitFor(ctx, seq); err != nil {
			return nil, 0, err
		}
	}
	return ct.store.State(agent)
}

// publishState returns the chat.Config.OnState of an agent: each stored
// state change is published to its clients (host.Env.PublishState), then
// next, if any, is called. A publish that fails is logged: the state is
// stored, and a client reading it later gets it.
func publishState(env *host.Env, next func(context.Context, int, json.RawMessage)) func(context.Context, int, json.RawMessage) {
	return func(ctx context.Context, version int, value json.RawMessage) {
		if err := env.PublishState(version, value); err != nil {
			env.Logger.Warn("publish state", "version", version, "err", err)
		}
		if next != nil {
			next(ctx, version, value)
		}
	}
}

// budgetNotice returns the chat.Config.OnBudget of an agent: a turn parked
// at its soft budget limit, and the park's decision, are broadcast to its
// clients ({"type":"broadcast","data":{"kind":"budget.parked","park":...}})
// and recorded in the audit log (action budget.parked with code 402 and
// the reason, budget.approved or budget.denied); then next, if any, is
// called. A broadcast that fails is logged: the park is stored, and the
// approvals verb lists it.
func budgetNotice(env *host.Env, next func(context.Context, chat.BudgetNotice)) func(context.Context, chat.BudgetNotice) {
	return func(ctx context.Context, n chat.BudgetNotice) {
		if err := env.Broadcast(ctx, n); err != nil {
			env.Logger.Warn("broadcast budget notice", "kind", n.Kind, "err", err)
		}
		var why error
		if n.Kind == "budget.parked" {
			why = &parkNotice{reason: "the turn " + n.Park.RequestID + " waits for approval " + n.Park.ApprovalID + " at " + n.Park.Reason}
		}
		env.Audit(ctx, n.Kind, why)
		if next != nil {
			next(ctx, n)
		}
	}
}

// parkNotice is the audit record's reason of a park: code 402.
type parkNotice struct{ reason string }

func (p *parkNotice) Error() string   { return p.reason }
func (p *parkNotice) StatusCode() int { return http.StatusPaymentRequired }

// APIError is the reason, as a 402.
func (p *parkNotice) APIError() *apierror.Error {
	return apierror.New(apierror.OverBudget, "%s", p.reason).WithCause(p)
}
