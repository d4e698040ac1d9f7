package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/forever-agents/forever/agentd"
	"github.com/forever-agents/forever/agentd/tenancy"
	"github.com/forever-agents/forever/auth"
)

const tenantUsage = `Usage:
  agentd tenant create <name> --creds admin.creds --out dir [--nats-url url] [quotas]
      create the tenant (or, if it exists, mint another credential), write
      dir/<name>.creds and print {"tenant","token","account","created","quota"}
      as one JSON line; token is the HTTP bearer token
  agentd tenant revoke <name> --creds admin.creds [--nats-url url]
      revoke every credential of the tenant: its NATS connections are closed
      and its tokens refused; print {"tenant","revoked"}

Quotas (create; 0 is no limit):
  --rate n          commands and HTTP requests per second
  --burst n         requests above the rate at once
  --max-turns n     chat turns running at once
  --max-agents n    agents
  --max-bytes size  bytes stored (JetStream), e.g. 1GiB

--nats-url defaults to $FOREVER_NATS_URL or nats://127.0.0.1:4222, --creds to
$FOREVER_CREDS: the admin credential agentd wrote to <data>/admin.creds;
--tls-ca (default $FOREVER_TLS_CA) is the CA of agentd's certificate with TLS.
`

// tenantRequestTimeout bounds a tenant request: create waits for the
// tenant's daemon to start.
const tenantRequestTimeout = 90 * time.Second

func runTenant(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	err := tenantCommand(ctx, args, getenv, stdout)
	var ce *cliError
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprint(stdout, tenantUsage)
		return exitOK
	case errors.As(err, &ce):
		fmt.Fprintln(stderr, "agentd tenant:", ce.err)
		if ce.code == exitUsage {
			fmt.Fprint(stderr, "\n"+tenantUsage)
		}
		return ce.code
	default:
		fmt.Fprintln(stderr, "agentd tenant:", err)
		return exitFailed
	}
}

func tenantCommand(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	if len(args) == 0 {
		return usageErr("missing create or revoke")
	}
	verb := args[0]
	if verb == "-h" || verb == "--help" || verb == "help" {
		return flag.ErrHelp
	}
	fs := flag.NewFlagSet("agentd tenant "+verb, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	natsURL, creds, tlsCA := clientFlags(fs, getenv)
	out := fs.String("out", "", "")
	var q auth.Quota
	fs.Float64Var(&q.Rate, "rate", 0, "")
	fs.IntVar(&q.Burst, "burst", 0, "")
	fs.IntVar(&q.Turns, "max-turns", 0, "")
	fs.IntVar(&q.Agents, "max-agents", 0, "")
	maxBytes := fs.String("max-bytes", "0", "")
	pos, err := parseInterleaved(fs, args[1:])
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageErr("tenant %s takes one tenant name, got %d arguments", verb, len(pos))
	}
	name := pos[0]
	if err := auth.CheckName(name); err != nil {
		return usageErr("%v", err)
	}
	if *creds == "" {
		return usageErr("--creds is required: the admin credential, <data>/%s", agentd.AdminCredsFile)
	}
	var subject string
	var payload any
	switch verb {
	case "create":
		if *out == "" {
			return usageErr("--out is required: the directory to write %s.creds to", name)
		}
		if q.Bytes, err = agentd.ParseSize(*maxBytes); err != nil {
			return usageErr("--max-bytes: %v", err)
		}
		if q.Rate < 0 || q.Burst < 0 || q.Turns < 0 || q.Agents < 0 {
			return usageErr("quotas must not be negative")
		}
		subject, payload = tenancy.AdminCreateSubject, tenancy.CreateRequest{Name: name, Quota: q}
	case "revoke":
		subject, payload = tenancy.AdminRevokeSubject, tenancy.RevokeRequest{Name: name}
	default:
		return usageErr("unknown tenant command %q: create or revoke", verb)
	}
	// A permissions violation (creds that are not the admin's) arrives
	// asynchronously; it ends the request at once.
	rctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	opts := append(clientOptions(*creds, *tlsCA), nats.Name("agentd tenant"),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { cancel(err) }))
	nc, err := nats.Connect(*natsURL, opts...)
	if err != nil {
		return fmt.Errorf("connect to NATS at %s with %s: %w", *natsURL, *creds, err)
	}
	defer nc.Close()
	body, _ := json.Marshal(payload)
	tctx, tcancel := context.WithTimeout(rctx, tenantRequestTimeout)
	defer tcancel()
	msg, err := nc.RequestWithContext(tctx, subject, body)
	if cause := context.Cause(rctx); cause != nil && errors.Is(cause, nats.ErrPermissionViolation) {
		err = nats.ErrNoResponders // the admin service is not visible with these creds
	}
	if errors.Is(err, nats.ErrNoResponders) {
		return fmt.Errorf("no agentd with --auth answers on %s (is it running with --auth, and is --creds its admin.creds?)", *natsURL)
	}
	if err != nil {
		return fmt.Errorf("tenant %s: %w", verb, err)
	}
	if code := msg.Header.Get("Nats-Service-Error-Code"); code != "" {
		return fmt.Errorf("tenant %s: %s (%s)", verb, msg.Header.Get("Nats-Service-Error"), code)
	}
	if verb == "revoke" {
		_, err = fmt.Fprintln(stdout, string(msg.Data))
		return err
	}
	var reply tenancy.CreateReply
	if err := json.Unmarshal(msg.Data, &reply); err != nil {
		return fmt.Errorf("tenant create: bad reply: %w", err)
	}
	if err := os.MkdirAll(*out, 0o700); err != nil {
		return err
	}
	path := filepath.Join(*out, name+".creds")
	if err := auth.WriteCreds(path, []byte(reply.Creds)); err != nil {
		return err
	}
	line, _ := json.Marshal(map[string]any{
		"tenant": reply.Tenant, "token": reply.Token, "account": reply.Account,
		"created": reply.Created, "quota": reply.Quota, "creds": path,
	})
	_, err = fmt.Fprintln(stdout, string(line))
	return err
}
