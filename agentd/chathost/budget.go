package chathost

import (
	"context"
	"encoding/json"
	"io"
	"net/http"

	"github.com/forever-agents/forever/agentd/host"
	"github.com/forever-agents/forever/chat"
	"github.com/forever-agents/forever/chat/cost"
	"github.com/forever-agents/forever/chat/llm"
	"github.com/forever-agents/forever/internal/apierror"
)

// BudgetRequest is the payload of the budget verb: any of the limits sets
// them (the others keep their values); none reads the budget. The reply
// is a chat.BudgetStatus either way.
type BudgetRequest struct {
	// Tokens is the token limit per period (input and output of the
	// agent's model calls); 0: none.
	Tokens *int64 `json:"tokens,omitempty"`
	// Cost is the cost limit per period in dollars ("1.50"); "0": none.
	Cost *string `json:"cost,omitempty"`
	// Period is the budget's period ("24h"), at least 1m.
	Period *string `json:"period,omitempty"`
	// Soft is the fraction of a limit at which a turn parks for approval,
	// in (0, 1].
	Soft *float64 `json:"soft,omitempty"`
}

// empty reports whether r sets nothing: it reads the budget.
func (r BudgetRequest) empty() bool {
	return r.Tokens == nil && r.Cost == nil && r.Period == nil && r.Soft == nil
}

// budget answers the budget verb.
func (c *Agent) budget(ctx context.Context, data json.RawMessage) (any, error) {
	var req BudgetRequest
	if err := decodeOptional(data, &req); err != nil {
		return nil, err
	}
	if req.empty() {
		return c.Budget(ctx)
	}
	u := chat.BudgetUpdate{Tokens: req.Tokens, Period: req.Period, Soft: req.Soft}
	if req.Cost != nil {
		m, err := cost.ParseMicros(*req.Cost)
		if err != nil {
			return nil, host.ErrBadRequest.Wrapf("budget: \"cost\" must be dollars like \"1.50\" (at most six decimals), got %q", apierror.Echo(*req.Cost))
		}
		u.Cost = &m
	}
	return c.SetBudget(ctx, u)
}

// UsageReply is the reply of the usage verb: the agent's usage with its
// cost, and its budget when one limits it.
type UsageReply struct {
	chat.Usage
	Budget *chat.BudgetStatus `json:"budget,omitempty"`
}

func (c *Agent) usage(ctx context.Context) (UsageReply, error) {
	u, err := c.Usage()
	if err != nil {
		return UsageReply{}, err
	}
	b, err := c.Budget(ctx)
	if err != nil {
		return UsageReply{}, err
	}
	r := UsageReply{Usage: u}
	if b.Limited() || len(b.Shared) > 0 {
		r.Budget = &b
	}
	return r, nil
}

// priceOf is the price of provider's model in t, and whether t has one.
func priceOf(t cost.Table, p llm.Provider) (price cost.Price, model string, ok bool) {
	if m, isModel := p.(interface{ Model() string }); isModel {
		model = m.Model()
	}
	price, ok = t.Lookup(p.Name(), model)
	return price, model, ok
}

// serveBudget serves GET /v1/agents/{id}/budget (the budget verb without a
// payload) and PUT /v1/agents/{id}/budget with a BudgetRequest body.
func serveBudget(h *host.Host) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var payload any
		if r.Method == http.MethodPut {
			body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 64<<10))
			if err != nil {
				apierror.New(apierror.TooLarge, "the body of a budget is at most 64 KiB").WriteHTTP(w)
				return
			}
			var req BudgetRequest
			if err := apierror.Decode(body, &req); err != nil {
				host.ClientError(err).WriteHTTP(w)
				return
			}
			if req.empty() {
				apierror.New(apierror.BadRequest, "the body must set a limit: {\"tokens\": N, \"cost\": \"1.50\", \"period\": \"24h\", \"soft\": 0.8}").WriteHTTP(w)
				return
			}
			payload = json.RawMessage(body)
		}
		host.ServeCommand(w, r, h, "budget", payload)
	})
}
