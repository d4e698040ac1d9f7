package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/nats-io/nats.go"

	"github.com/forever-agents/forever/agentd/host"
	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/internal/apierror"
)

const forkUsage = `Usage:
  agentd fork <agent> --to <new agent id> [--at <message id>]
      fork an agent: the new agent's conversation is the agent's up to the
      message --at (all of it without --at), shared by reference (nothing
      of the parent's history is copied in the log); new chats on each go
      their own way. The new id must be unused and of the agent's type.

It talks to a running agentd over NATS: --server (alias --nats-url; default
$NATS_URL or nats://127.0.0.1:4222), --creds (default $FOREVER_CREDS),
--tls-ca (default $FOREVER_TLS_CA).
`

// forkOpts are the flags of fork.
type forkOpts struct {
	natsURL, creds, tlsCA *string
	to, at                string
}

// forkFlagSet defines the flags of fork.
func forkFlagSet(cmd string, getenv func(string) string) (*flag.FlagSet, *forkOpts) {
	fs := flag.NewFlagSet("agentd "+cmd, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var o forkOpts
	o.natsURL, o.creds, o.tlsCA = clientFlags(fs, getenv)
	fs.StringVar(&o.to, "to", "", "the new agent's `id` (required; unused, of the agent's type)")
	fs.StringVar(&o.at, "at", "", "the `message id` the fork's conversation ends with (default: the whole conversation)")
	return fs, &o
}

// forkCommand runs "agentd fork".
func forkCommand(ctx context.Context, in invocation, args []string) error {
	getenv, stdout := in.getenv, in.stdout
	fs, o := forkFlagSet("fork", getenv)
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if _, err := oneAgent(pos); err != nil {
		return err
	}
	switch {
	case o.to == "":
		return usageErr("--to is required: the new agent's id")
	case !eventlog.ValidToken(o.to):
		return usageErr("%s", apierror.BadAgentID("--to", o.to).Message)
	}
	opts := append(clientOptions(*o.creds, *o.tlsCA), nats.Name("agentd fork"))
	nc, err := nats.Connect(*o.natsURL, opts...)
	if err != nil {
		return connectError(*o.natsURL, opts, err)
	}
	defer nc.Close()
	var rep host.ForkReply
	if err := request(ctx, nc, pos[0], "fork", host.ForkRequest{To: o.to, At: o.at}, &rep); err != nil {
		return err
	}
	at := "its whole conversation"
	if rep.At != "" {
		at = "its conversation up to message " + rep.At
	}
	_, err = fmt.Fprintf(stdout, "%s: forked from %s, %s (%d messages, parent's event %d)\n", rep.Agent, rep.Parent, at, rep.Messages, rep.Upto)
	return err
}
