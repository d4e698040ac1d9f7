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
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/forever-agents/forever/agentd"
	"github.com/forever-agents/forever/agentd/tenancy"
	"github.com/forever-agents/forever/auth"
)

const tenantUsage = `Usage:
  agentd tenant create <name> --creds admin.creds --out dir [credential] [quotas] [budgets]
      create the tenant (or, if it exists, mint another credential), write
      dir/<name>.creds (dir/<name>-<token-name>.creds with --token-name) and
      print {"tenant","cred","role","expires","token","account","created",
      "quota","limits","budget","creds"} as one JSON line; token is the HTTP bearer
      token, creds and token are one credential. With --out - the creds
      file goes to stdout and the JSON line to stderr, for a pod whose
      image has no shell:
        kubectl exec forever-0 -- agentd tenant create acme \
          --creds /data/admin.creds --out - > acme.creds 2> acme.json
  agentd tenant revoke <name> --creds admin.creds
      revoke every credential of the tenant: its NATS connections are closed,
      its tokens refused, and OIDC tokens issued until now refused too; print
      {"tenant","revoked"}
  agentd tenant token revoke <name> <token-name> --creds admin.creds
      revoke one credential (its creds and its token); print
      {"tenant","cred","revoked"}
  agentd tenant disable <name> --creds admin.creds
      refuse the tenant everywhere (creds, tokens, OIDC tokens, open streams)
      and stop its agents, keeping its data and credentials; print
      {"tenant","disabled"}
  agentd tenant enable <name> --creds admin.creds
      undo disable
  agentd tenant move <name> --creds admin.creds
      move a tenant created unsharded (by an earlier release) into the
      shards of agentd's cluster while the cluster serves: the tenant's
      agents stop on every node, its log is copied into the shards (every
      agent's history, streams, fibers and schedules, with their writers
      and epochs), and they start again; print {"tenant","shards",
      "partitions","moved","finished","agents","events","chunks",
      "remapped","perShard","tookMs","copyMs"}. Every node must run this release;
      a move that stopped part way leaves the tenant stopped: run it again
      to finish it. Waits up to an hour.

Credential (create):
  --role r          reader (reads messages and streams, starts nothing),
                    approver (also answers approvals), writer (the default:
                    also chats, stops, sets state, gives tool results) or
                    admin (also /debug/quarantine)
  --expires d       how long it works: 720h, 30d, 2w (default never)
  --token-name n    its name, unique in the tenant, for audit and token
                    revoke (default cred-<random>)

Quotas (create; 0 or absent: the node's --tenant-default-*; unlimited: no limit):
  --rate n            commands and HTTP requests per second
  --burst n           requests above the rate at once
  --max-turns n       chat turns running at once
  --max-agents n      agents
  --max-bytes size    bytes stored (JetStream), e.g. 1GiB
  --max-memory size   JetStream memory storage
  --max-conns n       NATS connections (agentd's own, two a node, included)
  --max-subs n        subscriptions per client connection
  --max-payload size  largest message a client publishes
  --max-streams n     JetStream streams (agentd's own included)
  --max-consumers n   JetStream consumers (agentd's own included)
  --model-weight n    its weight in sharing the model's rate limits (--model-limit):
                      under contention 3 gets three times the calls of 1 (0: 1)

Budgets (create; each <amount>/<period>[/<soft>], period at least 1m; 0/<period> removes
the limit; absent: kept as it was; checked before every model call, 402 past it):
  --token-budget n/p       tokens of all the tenant's agents together, e.g. 1000000/24h
  --cost-budget $/p        dollars of all its agents together, e.g. 5.00/24h
  --user-token-budget n/p  tokens of each user's agents together (the agent's meta user)
  --user-cost-budget $/p   dollars of each user's agents together
  soft, a fraction in (0, 1), parks a turn for an approval at it (default: no soft stop)

--server (alias --nats-url) defaults to $NATS_URL or nats://127.0.0.1:4222, --creds to
$FOREVER_CREDS: the admin credential agentd wrote to <data>/admin.creds;
--tls-ca (default $FOREVER_TLS_CA) is the CA of agentd's certificate with TLS.
`

// tenantRequestTimeout bounds a tenant request: create waits for the
// tenant's daemon to start.
const tenantRequestTimeout = 90 * time.Second

// tenantMoveTimeout bounds tenant move: agentd stops the tenant, copies
// its log (within an hour) and starts it again.
const tenantMoveTimeout = time.Hour + 4*time.Minute

// tenantCommand runs "agentd tenant".
func tenantCommand(ctx context.Context, in invocation, args []string) error {
	getenv, stdout, stderr := in.getenv, in.stdout, in.stderr
	if len(args) == 0 {
		return usageErr("missing create, revoke, token, disable, enable or move")
	}
	verb := args[0]
	if verb == "-h" || verb == "--help" || verb == "help" {
		return flag.ErrHelp
	}
	args = args[1:]
	if verb == "token" {
		if len(args) == 0 || args[0] != "revoke" {
			return usageErr("tenant token takes revoke: agentd tenant token revoke <name> <token-name>")
		}
		verb, args = "token revoke", args[1:]
	}
	fs, o := tenantFlagSet("tenant "+verb, getenv)
	natsURL, creds, tlsCA, out, role, expires, credName := o.natsURL, o.creds, o.tlsCA, o.out, o.role, o.expires, o.credName
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	q := o.q
	want := 1
	if verb == "token revoke" {
		want = 2
	}
	if len(pos) != want {
		return usageErr("tenant %s takes %d arguments, got %d", verb, want, len(pos))
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
	timeout := tenantRequestTimeout
	switch verb {
	case "create":
		if *out == "" {
			return usageErr("--out is required: the directory to write %s.creds to, or - for stdout", name)
		}
		if _, err := auth.ParseRole(*role); err != nil {
			return usageErr("--role: %v", err)
		}
		if _, err := auth.ParseExpiry(*expires); err != nil {
			return usageErr("--expires: %v", err)
		}
		if *credName != "" {
			if err := auth.CheckCredName(*credName); err != nil {
				return usageErr("--token-name: %v", err)
			}
		}
		subject, payload = tenancy.AdminCreateSubject, tenancy.CreateRequest{Name: name, Quota: q, Budget: o.budget, Role: *role, Expires: *expires, Cred: *credName}
	case "revoke":
		subject, payload = tenancy.AdminRevokeSubject, tenancy.RevokeRequest{Name: name}
	case "disable":
		subject, payload = tenancy.AdminDisableSubject, tenancy.RevokeRequest{Name: name}
	case "enable":
		subject, payload = tenancy.AdminEnableSubject, tenancy.RevokeRequest{Name: name}
	case "move":
		subject, payload, timeout = tenancy.AdminMoveSubject, tenancy.RevokeRequest{Name: name}, tenantMoveTimeout
	case "token revoke":
		if err := auth.CheckCredName(pos[1]); err != nil {
			return usageErr("%v", err)
		}
		subject, payload = tenancy.AdminTokenRevokeSubject, tenancy.TokenRevokeRequest{Name: name, Cred: pos[1]}
	default:
		return usageErr("unknown tenant command %q: create, revoke, token revoke, disable, enable or move", verb)
	}
	msg, err := adminRequestWithin(ctx, timeout, *natsURL, *creds, *tlsCA, subject, payload)
	if err != nil {
		return fmt.Errorf("tenant %s: %w", verb, err)
	}
	if verb != "create" {
		_, err = fmt.Fprintln(stdout, string(msg.Data))
		return err
	}
	var reply tenancy.CreateReply
	if err := json.Unmarshal(msg.Data, &reply); err != nil {
		return fmt.Errorf("tenant create: bad reply: %w", err)
	}
	path, summary := "-", stderr
	if *out == "-" {
		// The creds on stdout, the summary on stderr: kubectl exec ... >
		// acme.creds keeps them apart.
		if _, err := io.WriteString(stdout, reply.Creds); err != nil {
			return err
		}
	} else {
		if err := os.MkdirAll(*out, 0o700); err != nil {
			return err
		}
		file := name + ".creds"
		if *credName != "" {
			file = name + "-" + *credName + ".creds"
		}
		path, summary = filepath.Join(*out, file), stdout
		if err := auth.WriteCreds(path, []byte(reply.Creds)); err != nil {
			return err
		}
	}
	line, _ := json.Marshal(map[string]any{
		"tenant": reply.Tenant, "token": reply.Token, "account": reply.Account,
		"created": reply.Created, "quota": reply.Quota, "limits": reply.Limits, "budget": reply.Budget, "creds": path,
		"cred": reply.Cred, "role": reply.Role, "expires": reply.Expires,
	})
	_, err = fmt.Fprintln(summary, string(line))
	return err
}

// tenantOpts are the flags of the tenant commands.
type tenantOpts struct {
	natsURL, creds, tlsCA, out, role, expires, credName *string
	q                                                   auth.Quota
	budget                                              auth.Budget
}

// tenantFlagSet defines the flags of the tenant commands (cmd: "tenant
// create", ...).
func tenantFlagSet(cmd string, getenv func(string) string) (*flag.FlagSet, *tenantOpts) {
	fs := flag.NewFlagSet("agentd "+cmd, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var o tenantOpts
	o.natsURL, o.creds, o.tlsCA = clientFlags(fs, getenv)
	o.out = fs.String("out", "", "the `dir` to write <name>.creds to, or - for stdout (create)")
	o.role = fs.String("role", "", "the credential's `role`: reader, approver, writer (the default) or admin (create)")
	o.expires = fs.String("expires", "", "how `long` the credential works: 720h, 30d, 2w (create; default never)")
	o.credName = fs.String("token-name", "", "the credential's `name`, unique in the tenant (create; default cred-<random>)")
	quotaFlags(fs, &o.q)
	budgetFlags(fs, &o.budget)
	return fs, &o
}

// budgetFlags defines tenant create's budget flags on b:
// <amount>/<period>[/<soft>]. A limit of 0 is kept: it removes the
// record's limit.
func budgetFlags(fs *flag.FlagSet, b *auth.Budget) {
	for _, f := range []struct {
		name  string
		dst   **auth.BudgetLimit
		money bool
		usage string
	}{
		{"token-budget", &b.Tokens, false, "at most `n/period` tokens of all the tenant's agents, e.g. 1000000/24h"},
		{"cost-budget", &b.Cost, true, "at most `dollars/period` of all the tenant's agents, e.g. 5.00/24h"},
		{"user-token-budget", &b.UserTokens, false, "at most `n/period` tokens of each user's agents, e.g. 100000/24h"},
		{"user-cost-budget", &b.UserCost, true, "at most `dollars/period` of each user's agents, e.g. 1.00/24h"},
	} {
		agentd.BudgetFlag(fs, f.name, f.usage+" (create; /soft after the period parks at that fraction; 0/period removes it)", f.money, func(l auth.BudgetLimit) {
			*f.dst = &l
		})
	}
}

// quotaFlags defines tenant create's quota flags on q: a number (or size),
// 0 for the node's default, or unlimited.
func quotaFlags(fs *flag.FlagSet, q *auth.Quota) {
	fs.Func("model-weight", "the tenant's `weight` in sharing the model's rate limits (--model-limit): 3 gets three times the calls of 1 under contention (create; 0: 1)", func(s string) (err error) {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 0 || n > auth.MaxModelWeight {
			return fmt.Errorf("%q is not a weight from 1 to %d", s, auth.MaxModelWeight)
		}
		q.ModelWeight = n
		return nil
	})
	fs.Func("rate", "at most `n` commands and HTTP requests per second (create; 0: the node's default; unlimited)", func(s string) (err error) { q.Rate, err = auth.ParseRate(s); return err })
	for _, f := range []struct {
		name  string
		i     *int64
		n     *int
		size  bool
		usage string
	}{
		{name: "burst", n: &q.Burst, usage: "allow `n` requests above the rate at once"},
		{name: "max-turns", n: &q.Turns, usage: "at most `n` chat turns running at once"},
		{name: "max-agents", n: &q.Agents, usage: "at most `n` agents"},
		{name: "max-bytes", i: &q.Bytes, size: true, usage: "at most `size` bytes stored (JetStream), e.g. 1GiB"},
		{name: "max-memory", i: &q.Memory, size: true, usage: "at most `size` of JetStream memory storage"},
		{name: "max-conns", i: &q.Conns, usage: "at most `n` NATS connections (agentd's own, two a node, included)"},
		{name: "max-subs", i: &q.Subs, usage: "at most `n` subscriptions per client connection"},
		{name: "max-payload", i: &q.Payload, size: true, usage: "at most `size` for the largest message a client publishes"},
		{name: "max-streams", i: &q.Streams, usage: "at most `n` JetStream streams (agentd's own included)"},
		{name: "max-consumers", i: &q.Consumers, usage: "at most `n` JetStream consumers (agentd's own included)"},
	} {
		fs.Func(f.name, f.usage+" (create; 0: the node's default; unlimited)", func(s string) error {
			v, err := auth.ParseLimit(s, f.size)
			if err != nil {
				return err
			}
			if f.i != nil {
				*f.i = v
			} else {
				*f.n = int(v)
			}
			return nil
		})
	}
}

// adminRequest sends one request to the admin service with the admin
// credential and returns its reply; a service error is an error naming
// its code.
func adminRequest(ctx context.Context, natsURL, creds, tlsCA, subject string, payload any) (*nats.Msg, error) {
	return adminRequestWithin(ctx, tenantRequestTimeout, natsURL, creds, tlsCA, subject, payload)
}

// adminRequestWithin is adminRequest waiting up to timeout for the reply.
func adminRequestWithin(ctx context.Context, timeout time.Duration, natsURL, creds, tlsCA, subject string, payload any) (*nats.Msg, error) {
	// A permissions violation (creds that are not the admin's) arrives
	// asynchronously; it ends the request at once.
	rctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	opts := append(clientOptions(creds, tlsCA), nats.Name("agentd tenant"),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { cancel(err) }))
	nc, err := nats.Connect(natsURL, opts...)
	if err != nil {
		return nil, connectError(natsURL, opts, err)
	}
	defer nc.Close()
	body, _ := json.Marshal(payload)
	tctx, tcancel := context.WithTimeout(rctx, timeout)
	defer tcancel()
	msg, err := nc.RequestWithContext(tctx, subject, body)
	if cause := context.Cause(rctx); cause != nil && errors.Is(cause, nats.ErrPermissionViolation) {
		err = nats.ErrNoResponders // the admin service is not visible with these creds
	}
	if errors.Is(err, nats.ErrNoResponders) {
		return nil, fmt.Errorf("no agentd with --auth answers on %s (is it running with --auth, and is --creds its admin.creds?)", natsURL)
	}
	if err != nil {
		return nil, err
	}
	if code := msg.Header.Get("Nats-Service-Error-Code"); code != "" {
		return nil, fmt.Errorf("%s (%s)", msg.Header.Get("Nats-Service-Error"), code)
	}
	return msg, nil
}
