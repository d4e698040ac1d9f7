package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/forever-agents/forever/agentd/host"
	"github.com/forever-agents/forever/agents"
	"github.com/forever-agents/forever/auth"
	"github.com/forever-agents/forever/chat"
	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/internal/apierror"
)

const agentsUsage = `Usage:
  agentd agents [--user u] [--tag t] [--type x] [--version v] [--limit n]
      list the agents (every page), with their type, status, user, tags,
      last activity and sub-agents (how many, how many running, how many
      ephemeral: new agents of one call each, kept until deleted); --limit
      caps how many are printed (default: all); --version keeps the agents
      with work (a turn, a fiber) started by that version of their type's
      code: none left means the version has drained
  agentd delete <agent> [--tenant name]
      delete an agent: its events and chunks are purged, it leaves every
      view, and its id can be used again by a new agent
  agentd cluster [--json]
      show the cluster as the answering node sees it: its nodes (live or
      not, partitions owned, record format read), the active record
      format, and the streams; --json prints GET /v1/cluster's document

They talk to a running agentd over NATS: --server (alias --nats-url; default
$NATS_URL or nats://127.0.0.1:4222), --creds (default
$FOREVER_CREDS), --tls-ca (default $FOREVER_TLS_CA). With --auth, agents
lists the tenant whose client creds --creds names; delete is an admin
command: --creds is the admin credential (<data>/admin.creds) and --tenant
names the tenant whose agent goes (a tenant's own creds cannot delete).
`

// agentsOpts are the flags of agents and delete.
type agentsOpts struct {
	natsURL, creds, tlsCA *string
	q                     agents.Query
	limit                 int
	tenant                string
	json                  bool
}

// agentsFlagSet defines the flags of agents or delete (cmd).
func agentsFlagSet(cmd string, getenv func(string) string) (*flag.FlagSet, *agentsOpts) {
	fs := flag.NewFlagSet("agentd "+cmd, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var o agentsOpts
	o.natsURL, o.creds, o.tlsCA = clientFlags(fs, getenv)
	if cmd == "cluster" {
		fs.BoolVar(&o.json, "json", false, "print the answer as GET /v1/cluster's JSON document")
	} else if cmd == "agents" {
		fs.StringVar(&o.q.User, "user", "", "only the agents of this `user`")
		fs.StringVar(&o.q.Tag, "tag", "", "only the agents with this `tag`")
		fs.StringVar(&o.q.Type, "type", "", "only the agents of this `type`")
		fs.StringVar(&o.q.Version, "version", "", "only the agents with work started by this `version` of their type's code")
		fs.IntVar(&o.limit, "limit", 0, "print at most `n` agents (0: all)")
	} else {
		fs.StringVar(&o.tenant, "tenant", "", "the `name` of the tenant whose agent it is (admin, with --auth)")
	}
	return fs, &o
}

// agentsCommand runs "agentd agents", "agentd delete" or "agentd cluster"
// (in.cmd).
func agentsCommand(ctx context.Context, in invocation, args []string) error {
	cmd, getenv, stdout := in.cmd, in.getenv, in.stdout
	fs, o := agentsFlagSet(cmd, getenv)
	natsURL, creds, tlsCA := o.natsURL, o.creds, o.tlsCA
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	q, limit, tenant, asJSON := o.q, o.limit, o.tenant, o.json
	switch {
	case (cmd == "agents" || cmd == "cluster") && len(pos) > 0:
		return usageErr("unexpected argument %q", pos[0])
	case cmd == "agents" && limit < 0:
		return usageErr("--limit must not be negative")
	case cmd == "delete" && len(pos) == 0:
		return usageErr("missing agent id")
	case cmd == "delete" && len(pos) > 1:
		return usageErr("unexpected argument %q", pos[1])
	case cmd == "delete" && !eventlog.ValidToken(pos[0]):
		return usageErr("%s", apierror.BadAgentID("agent id", pos[0]).Message)
	}
	opts := append(clientOptions(*creds, *tlsCA), nats.Name("agentd "+cmd))
	nc, err := nats.Connect(*natsURL, opts...)
	if err != nil {
		return connectError(*natsURL, opts, err)
	}
	defer nc.Close()
	if cmd == "agents" {
		return listAgents(ctx, nc, q, limit, stdout)
	}
	if cmd == "cluster" {
		return showCluster(ctx, nc, asJSON, stdout)
	}
	if tenant == "" {
		return deleteAgent(ctx, nc, pos[0], "", stdout)
	}
	// The admin credential reaches a tenant's agents through the access
	// the admin service grants: agentd's own user in the tenant's account.
	access, err := tenantAccess(ctx, nc, []string{tenant})
	if err != nil {
		return err
	}
	if len(access) != 1 {
		return fmt.Errorf("no access to tenant %s", tenant)
	}
	return withTenant(*natsURL, opts, access[0], func(tnc *nats.Conn) error {
		return deleteAgent(ctx, tnc, pos[0], access[0].Actor, stdout)
	})
}

// listAgents prints every page of the listing q selects, at most limit
// agents when limit > 0.
func listAgents(ctx context.Context, nc *nats.Conn, q agents.Query, limit int, stdout io.Writer) error {
	subject := host.ListSubject(eventlog.DefaultPrefix)
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	n := 0
	for {
		if limit > 0 {
			q.Limit = min(limit-n, agents.MaxLimit)
		}
		body, _ := json.Marshal(q)
		msg, err := requestAgentd(ctx, nc, subject, body)
		if err != nil {
			return err
		}
		var p agents.Page
		if err := json.Unmarshal(msg.Data, &p); err != nil {
			return fmt.Errorf("decode the listing: %w", err)
		}
		for _, e := range p.Agents {
			if n == 0 {
				fmt.Fprintln(tw, "AGENT\tTYPE\tSTATUS\tUSER\tTAGS\tLAST ACTIVITY\tCHILDREN")
			}
			n++
			user := e.User
			if user == "" {
				user = "-"
			}
			tags := strings.Join(e.Tags, ",")
			if tags == "" {
				tags = "-"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", e.Agent, e.Type, e.Status, user, tags, e.LastActivity.UTC().Format(time.RFC3339), children(e.Children))
		}
		if p.Next == "" || limit > 0 && n >= limit {
			break
		}
		q.Cursor = p.Next
	}
	if n == 0 {
		_, err := fmt.Fprintln(stdout, "no agents")
		return err
	}
	return tw.Flush()
}

// deleteAgent sends the delete verb and prints what it did. actor, when
// set, is the admin's actor token (tenancy.TenantAccess): the audit log
// then names the admin.
func deleteAgent(ctx context.Context, nc *nats.Conn, agent, actor string, stdout io.Writer) error {
	var rep host.DeleteReply
	var hdr nats.Header
	if actor != "" {
		hdr = nats.Header{auth.HeaderActor: []string{actor}}
	}
	if err := requestWith(ctx, nc, agent, "delete", nil, hdr, &rep); err != nil {
		if strings.Contains(strings.ToLower(err.Error()), "permissions violation") {
			return fmt.Errorf("%w: these creds may not delete; delete is an admin command: --creds <data>/admin.creds --tenant <name>", err)
		}
		return err
	}
	what := "deleted"
	if rep.Again {
		what = "already deleted; purged again"
	}
	_, err := fmt.Fprintf(stdout, "%s: %s (tombstone at %d)\n", rep.Agent, what, rep.Tombstone)
	return err
}

// children is the CHILDREN column of a listed agent: how many sub-agents
// it has, how many of them run and how many are ephemeral (new agents of
// one call each, kept until deleted): "3, 1 running, 2 ephemeral", or "-".
func children(cs []agents.Child) string {
	if len(cs) == 0 {
		return "-"
	}
	running, ephemeral := 0, 0
	for _, c := range cs {
		if c.Status == chat.LinkRunning {
			running++
		}
		if c.Mode == chat.ModeEphemeral {
			ephemeral++
		}
	}
	out := strconv.Itoa(len(cs))
	if running > 0 {
		out += fmt.Sprintf(", %d running", running)
	}
	if ephemeral > 0 {
		out += fmt.Sprintf(", %d ephemeral", ephemeral)
	}
	return out
}

// requestAgentd sends one request to agentd's service on subject and
// returns its answer; no responder, a lost request and an error answer are
// errors that say which.
func requestAgentd(ctx context.Context, nc *nats.Conn, subject string, body []byte) (*nats.Msg, error) {
	rctx, cancel := context.WithTimeout(ctx, cliRequestTimeout)
	defer cancel()
	msg, err := nc.RequestWithContext(rctx, subject, body)
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return nil, fmt.Errorf("no agentd answers on %s (is agentd running and connected to %s?)", subject, nc.ConnectedUrlRedacted())
	case err != nil:
		return nil, fmt.Errorf("%s: %w", subject, err)
	}
	if code := msg.Header.Get("Nats-Service-Error-Code"); code != "" {
		return nil, fmt.Errorf("agentd answered %s: %s", code, msg.Header.Get("Nats-Service-Error"))
	}
	return msg, nil
}
