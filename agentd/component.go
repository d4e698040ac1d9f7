package agentd

import (
	"context"
	"log/slog"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/forever-agents/forever/agentd/quota"
	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/ownership"
)

// Component is a long-running part of the daemon, added with Daemon.Add.
// Run blocks until ctx is done and then returns nil, or returns an error,
// which stops the whole daemon. *eventlog.Projector is a Component.
type Component interface {
	Run(ctx context.Context) error
}

// ComponentFunc adapts a function to Component.
type ComponentFunc func(ctx context.Context) error

// Run calls f(ctx).
func (f ComponentFunc) Run(ctx context.Context) error { return f(ctx) }

var _ Component = (*eventlog.Projector)(nil)

// Deps are the resources a StartFunc wires components to. They are open from
// the moment the StartFuncs run until Run returns; the daemon owns and
// closes them, so components must not.
type Deps struct {
	// Config is the daemon's config with defaults applied.
	Config Config
	// Conn is the daemon's NATS connection (drained at shutdown).
	Conn *nats.Conn
	// Replies is the connection answers to clients go out on
	// (Reply): a tenant's daemon's replier (TenantLink.Replier), which
	// may publish only under _INBOX.; else Conn.
	Replies *nats.Conn
	// Log is the event log, with Pebble under <DataDir>/pebble.
	Log *eventlog.Log
	// Server is the embedded nats-server, nil with an external NATS.
	Server *server.Server
	// Ownership holds this node's partition leases: which agents it may
	// run and write now.
	Ownership *ownership.Manager
	// Views is the Follower of the events stream: a StartFunc adds the
	// projections of that stream to it (the runs, schedules and chat views
	// are there), so one consumer feeds them all in one Pebble batch and
	// read-your-writes waits on one cursor. The daemon runs it once every
	// StartFunc returned, and holds /readyz at 503 until it is ready. A
	// projection with a Projector of its own goes to Daemon.AddProjector.
	Views *eventlog.Follower
	// Operator holds the operator's keys and agentd's users with
	// Config.Auth (package tenancy mints tenants with it), else nil.
	Operator *Operator
	// Quotas enforces Config.Quota on a tenant's daemon, else nil (a nil
	// *quota.Enforcer allows everything).
	Quotas *quota.Enforcer
	// Logger is the daemon's logger.
	Logger *slog.Logger
	// Registerer receives metrics; they are served on /metrics.
	Registerer prometheus.Registerer
}

// StartFunc wires components once NATS and the event log are open, before
// HTTP serves and before any component runs. It may call Daemon.Add,
// Daemon.AddProjector and Daemon.Handle. ctx is for I/O during start-up
// only (creating streams, KV buckets, services); work that outlives the call
// goes into a Component. An error aborts the start: Run tears down what it
// opened and returns the error.
type StartFunc func(ctx context.Context, deps *Deps) error
