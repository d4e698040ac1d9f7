package host

import (
	"context"
	"encoding/json"
	"log/slog"

	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/fiber"
	"github.com/forever-agents/forever/keepalive"
)

// Agent is one agent instance built by a Factory: any value. The host calls
// the optional interfaces below that it implements.
type Agent any

// Factory builds the agent with the given id when it is first used (by a
// command, a due schedule, or recovery of its fibers after a restart). ctx is
// for I/O during construction only.
type Factory func(ctx context.Context, env *Env) (Agent, error)

// Env is what the host gives an agent: its identity and its handles on the
// log, its fibers, its keepalive and its schedules. The host owns them.
type Env struct {
	ID   string // the agent id, a subject token
	Type string // the registered type name
	// Log is the agent's handle on the event log: it appends to this
	// agent's subjects only, fenced by this node's lease of the agent's
	// partition, and reads like the log.
	Log *eventlog.Writer
	// Fibers runs the agent's durable fibers; its recovery hook calls the
	// agent's OnFiberRecovered.
	Fibers *fiber.Runner
	// KeepAlive keeps the agent active while a ref is held. Fibers hold one
	// while they run.
	KeepAlive *keepalive.Keeper
	// Schedules are the agent's durable alarms; when one is due the host
	// activates the agent and calls its OnSchedule.
	Schedules *Schedules
	Logger    *slog.Logger
	// Command sends a command to any agent, wherever it runs: the host's
	// command path (Host.Command), routed to the agent's owner like a
	// client's command. Agents use it to call other agents (chat's
	// sub-agents). ctx needs a deadline when the command may be
	// forwarded to another node.
	Command func(ctx context.Context, cmd Command) (json.RawMessage, error)

	pub *publisher // Broadcast and PublishState
	// audit is Config.AuditCommand for this agent, nil without one.
	audit func(ctx context.Context, action string, err error)
}

// Audit records something the agent did on its own in the audit log, as
// a command that changes the agent is (Config.AuditCommand): action names
// it ("budget.parked"), err, when not nil, its code and why. Without an
// audit log (no tenancy) it does nothing.
func (e *Env) Audit(ctx context.Context, action string, err error) {
	if e.audit != nil {
		e.audit(ctx, action, err)
	}
}

// Command is a request routed to an agent: forever.cmd.<agent>.<verb> on
// NATS, or a call of Host.Command.
type Command struct {
	Agent string
	Verb  string
	Data  json.RawMessage
	// RequestID is the command's identity, given where it entered the
	// cluster: its Idempotency-Key header when the client sent one, else an
	// id the receiving node minted. It travels with the command when the
	// command is forwarded to the agent's owner (header Forever-Request-Id),
	// so an agent type that stores it (chat does, when the client named
	// neither a request nor a message) runs the command once, whichever
	// nodes it passes through and however often routing retries it.
	RequestID string
}

// Headers of a command request.
const (
	// HeaderIdempotencyKey is a client's identity of a command: the same
	// key makes a retried command run once (chat's request id).
	HeaderIdempotencyKey = "Idempotency-Key"
	// headerRequestID carries Command.RequestID to the owner.
	headerRequestID = "Forever-Request-Id"
)

// CommandHandler is implemented by agents that take commands beyond the
// host's own (status, fibers, schedules). An unknown verb should return an
// error wrapping ErrNotFound.
type CommandHandler interface {
	HandleCommand(ctx context.Context, cmd Command) (any, error)
}

// FiberRecoverer is implemented by agents whose fibers can be recovered after
// a crash. Without it an orphaned fiber is abandoned.
type FiberRecoverer interface {
	OnFiberRecovered(ctx context.Context, rec fiber.Recovered) error
}

// ScheduleHandler is implemented by agents that set schedules.
type ScheduleHandler interface {
	OnSchedule(ctx context.Context, s keepalive.Schedule) error
}

// ErrorHandler receives errors that have no caller to return to: a
// background fiber that failed, a fiber abandoned after its attempts.
type ErrorHandler interface {
	OnError(ctx context.Context, err error)
}

// StoreLostHandler is implemented by agents that must act when the log lost
// their events under them (the events stream deleted or purged): the host
// has stopped the agent (its fibers interrupted, nothing recorded for
// them) and calls OnStoreLost before the views are rebuilt from what the
// stream holds now, so the views still show what the agent was doing. A
// chat agent ends the turn it was streaming with an error chunk there, so
// its clients see an error instead of waiting for good. cause names the
// stream and the loss.
type StoreLostHandler interface {
	OnStoreLost(ctx context.Context, cause error)
}

// Deactivator is told when the host drops an idle agent.
type Deactivator interface {
	OnDeactivate(ctx context.Context)
}

// Schedules are one agent's durable schedules.
type Schedules struct {
	s     *keepalive.Scheduler
	agent string
}

// Schedule stores a schedule; see keepalive.Scheduler.Schedule.
func (s *Schedules) Schedule(ctx context.Context, spec keepalive.Spec) (keepalive.Schedule, error) {
	return s.s.Schedule(ctx, s.agent, spec)
}

// Cancel removes a schedule and reports whether it existed.
func (s *Schedules) Cancel(ctx context.Context, id string) (bool, error) {
	return s.s.Cancel(ctx, s.agent, id)
}

// List returns the agent's schedules by due time.
func (s *Schedules) List() ([]keepalive.Schedule, error) { return s.s.List(s.agent) }
