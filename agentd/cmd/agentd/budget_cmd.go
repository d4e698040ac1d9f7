package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/forever-agents/forever/agentd/chathost"
	"github.com/forever-agents/forever/chat"
)

const budgetUsage = `Usage:
  agentd budget <agent>
      show the agent's budget: its limits, what it spent in the current
      period and when the period resets; and the budgets of its tenant and
      its user that limit it (agentd tenant create --token-budget ...)
  agentd budget <agent> [--tokens n] [--cost dollars] [--period 24h] [--soft f]
      set some of its limits (the others keep their values): tokens and
      cost per period (0: no limit), the period (at least 1m; periods are
      windows aligned to the Unix epoch, so 24h resets at 00:00 UTC), the
      soft fraction (at it a turn parks until approved: agentd approve)

At a hard limit the agent's turn ends before its next model call with an
error chunk and turn.failed code 402, and new chats get 402 until the
period resets. It is the budget verb (forever.cmd.<agent>.budget), over
NATS: --server (alias --nats-url; default $NATS_URL or
nats://127.0.0.1:4222), --creds (default $FOREVER_CREDS), --tls-ca
(default $FOREVER_TLS_CA).
`

// budgetOpts are the flags of budget.
type budgetOpts struct {
	natsURL, creds, tlsCA *string
	tokens                int64
	cost, period          string
	soft                  float64
}

// budgetFlagSet defines the flags of budget.
func budgetFlagSet(cmd string, getenv func(string) string) (*flag.FlagSet, *budgetOpts) {
	fs := flag.NewFlagSet("agentd "+cmd, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var o budgetOpts
	o.natsURL, o.creds, o.tlsCA = clientFlags(fs, getenv)
	fs.Int64Var(&o.tokens, "tokens", 0, "token limit per period, input and output (0: no limit)")
	fs.StringVar(&o.cost, "cost", "", "cost limit per period in `dollars`, like 1.50 (0: no limit)")
	fs.StringVar(&o.period, "period", "", "the budget's `period`, like 24h (default 24h)")
	fs.Float64Var(&o.soft, "soft", 0, "soft limit, a `fraction` of the limits in (0, 1] at which a turn parks for approval (default 0.8)")
	return fs, &o
}

// budgetCommand runs "agentd budget".
func budgetCommand(ctx context.Context, in invocation, args []string) error {
	getenv, stdout := in.getenv, in.stdout
	fs, o := budgetFlagSet("budget", getenv)
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if _, err := oneAgent(pos); err != nil {
		return err
	}
	var req chathost.BudgetRequest
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "tokens":
			req.Tokens = &o.tokens
		case "cost":
			req.Cost = &o.cost
		case "period":
			req.Period = &o.period
		case "soft":
			req.Soft = &o.soft
		}
	})
	opts := append(clientOptions(*o.creds, *o.tlsCA), nats.Name("agentd budget"))
	nc, err := nats.Connect(*o.natsURL, opts...)
	if err != nil {
		return connectError(*o.natsURL, opts, err)
	}
	defer nc.Close()
	var st chat.BudgetStatus
	if err := request(ctx, nc, pos[0], "budget", req, &st); err != nil {
		return err
	}
	return printBudget(stdout, pos[0], st)
}

// printBudget writes st as a few lines.
func printBudget(w io.Writer, agent string, st chat.BudgetStatus) error {
	limit := func(set bool, v string) string {
		if !set {
			return "no limit"
		}
		return v
	}
	fmt.Fprintf(w, "budget of %s: period %s, from %s, resets at %s\n", agent, st.Period,
		st.PeriodStart.UTC().Format(time.RFC3339), st.ResetsAt.UTC().Format(time.RFC3339))
	fmt.Fprintf(w, "  tokens  %d spent of %s\n", st.Spent.Tokens, limit(st.Tokens > 0, fmt.Sprint(st.Tokens)))
	fmt.Fprintf(w, "  cost    $%s spent of %s\n", st.Spent.Cost, limit(st.Cost > 0, "$"+st.Cost.String()))
	fmt.Fprintf(w, "  soft    %g (a turn parks for approval there)\n", st.Soft)
	if st.Exceeded != "" {
		fmt.Fprintf(w, "the %s limit is reached: new turns get 402 until %s\n", st.Exceeded, st.ResetsAt.UTC().Format(time.RFC3339))
	}
	for _, sh := range st.Shared {
		fmt.Fprintf(w, "budget of %s %s (shared): period %s, resets at %s\n", sh.Scope, sh.Name, sh.Period, sh.ResetsAt.UTC().Format(time.RFC3339))
		fmt.Fprintf(w, "  tokens  %d spent of %s\n", sh.Spent.Tokens, limit(sh.Tokens > 0, fmt.Sprint(sh.Tokens)))
		fmt.Fprintf(w, "  cost    $%s spent of %s\n", sh.Spent.Cost, limit(sh.Cost > 0, "$"+sh.Cost.String()))
		if sh.Exceeded != "" {
			fmt.Fprintf(w, "the %s %s's %s limit is reached: new turns get 402 until %s\n", sh.Scope, sh.Name, sh.Exceeded, sh.ResetsAt.UTC().Format(time.RFC3339))
		}
	}
	return nil
}
