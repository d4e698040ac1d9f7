package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/forever-agents/forever/agentd"
	"github.com/forever-agents/forever/agentd/audit"
	"github.com/forever-agents/forever/auth"
)

const auditUsage = `Usage:
  agentd audit tail --creds admin.creds [--tenant name] [-n 50] [--follow]
      print the audit log's last records (default 50; 0 for all) as JSON
      lines, oldest first, and with --follow the new ones as they come:
      {"time","node","tenant","cred","role","action","outcome","code",
      "detail","agent","from","suppressed"}

The audit log (agentd with --auth) records every admin operation, every
command that changes an agent and every auth refusal. --server (alias --nats-url) defaults to
$NATS_URL or nats://127.0.0.1:4222, --creds to $FOREVER_CREDS: the
admin credential agentd wrote to <data>/admin.creds.
`

// auditOpts are the flags of audit tail.
type auditOpts struct {
	natsURL, creds, tlsCA, tenant *string
	n                             *int
	follow                        *bool
}

// auditFlagSet defines the flags of audit tail.
func auditFlagSet(cmd string, getenv func(string) string) (*flag.FlagSet, *auditOpts) {
	fs := flag.NewFlagSet("agentd "+cmd, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var o auditOpts
	o.natsURL, o.creds, o.tlsCA = clientFlags(fs, getenv)
	o.tenant = fs.String("tenant", "", "only the records of this tenant `name`")
	o.n = fs.Int("n", 50, "print the last `n` records (0: all)")
	o.follow = fs.Bool("follow", false, "then print the new records as they come")
	return fs, &o
}

// auditCommand runs "agentd audit".
func auditCommand(ctx context.Context, in invocation, args []string) error {
	getenv, stdout := in.getenv, in.stdout
	if len(args) == 0 {
		return usageErr("missing tail")
	}
	if args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		return flag.ErrHelp
	}
	if args[0] != "tail" {
		return usageErr("unknown audit command %q: tail", args[0])
	}
	fs, o := auditFlagSet("audit tail", getenv)
	natsURL, creds, tlsCA, tenant, n, follow := o.natsURL, o.creds, o.tlsCA, o.tenant, o.n, o.follow
	pos, err := parseInterleaved(fs, args[1:])
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return usageErr("audit tail takes no arguments")
	}
	if *tenant != "" {
		if err := auth.CheckName(*tenant); err != nil {
			return usageErr("--tenant: %v", err)
		}
	}
	if *n < 0 {
		return usageErr("-n must not be negative")
	}
	if *creds == "" {
		return usageErr("--creds is required: the admin credential, <data>/%s", agentd.AdminCredsFile)
	}
	nc, err := nats.Connect(*natsURL, append(clientOptions(*creds, *tlsCA), nats.Name("agentd audit"))...)
	if err != nil {
		return fmt.Errorf("connect to NATS at %s with %s: %w", *natsURL, *creds, err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(stdout)
	err = audit.Tail(ctx, js, *tenant, *n, *follow, func(r audit.Record) error { return enc.Encode(r) })
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return fmt.Errorf("no audit log on %s: is agentd running with --auth, and is --creds its admin.creds?", *natsURL)
	}
	return err
}
