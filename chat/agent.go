package chat

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/forever-agents/forever/chat/chunk"
	"github.com/forever-agents/forever/chat/cost"
	"github.com/forever-agents/forever/chat/llm"
	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/fiber"
	"github.com/forever-agents/forever/tracing"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
)

// Log is the part of the event log an Agent uses. *eventlog.Log satisfies
// it.
type Log interface {
	Append(ctx context.Context, e eventlog.Event, opts ...eventlog.AppendOpt) (eventlog.Seq, error)
	Read(ctx context.Context, f eventlog.Filter, after eventlog.Seq, limit int) ([]eventlog.Event, error)
	LastSeq(ctx context.Context, f eventlog.Filter) (eventlog.Seq, error)
}

var _ Log = (*eventlog.Log)(nil)

// Clock tells time; tests pass a fake. fiber's Clock is the same interface.
type Clock interface {
	Now() time.Time
	After(d time.Duration) <-chan time.Time
}

type systemClock struct{}

func (systemClock) Now() time.Time                         { return time.Now() }
func (systemClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// TurnFiberPrefix starts the name of every chat turn fiber; the request id
// follows it.
const TurnFiberPrefix = "__chat_turn:"

// Defaults of Config.
const (
	// DefaultAttemptWindow is the window within which recoveries without
	// progress count as one attempt (the seeds' 30 s keepalive interval).
	DefaultAttemptWindow = 30 * time.Second
	DefaultStashInterval = time.Second
	DefaultStashChunks   = 64
	DefaultRetryBackoff  = 200 * time.Millisecond
	DefaultMaxPayload    = 1 << 20
	// DefaultToolWaitTimeout is how long a call waits for its approval or
	// client result by default.
	DefaultToolWaitTimeout = 24 * time.Hour
)

// Config configures an Agent. Zero fields take the defaults.
type Config struct {
	// Agent is the agent id, a subject token. Required.
	Agent string
	// Log is the event log. Required.
	Log Log
	// Store is the process's chat read side, its projectors running.
	// Required.
	Store *Store
	// Batcher commits chunks (a running eventlog.Batcher on the log, shared
	// by the process). Required.
	Batcher chunk.Batcher
	// Live, when set, gets each chunk of the agent's turns once it is
	// stored, for live followers (chunk.PublishLive; replay.WithLive
	// follows it). Nil: followers use a JetStream consumer.
	Live *chunk.Live
	// MaxPayload is the server's max payload; larger chunks are split.
	// Default 1 MiB.
	MaxPayload int64
	// Fibers runs the agent's turns as fibers. Its recovery hook must hand
	// chat turn fibers to OnFiberRecovered. Required.
	Fibers *fiber.Runner
	// Provider is the model. Required.
	Provider llm.Provider
	// System is the system prompt.
	System string
	// Model overrides the provider's model when set.
	Model string
	// OnChatRecovery decides what happens to a turn interrupted after it
	// streamed something. Nil: DefaultRecovery (persist and continue).
	OnChatRecovery func(ctx context.Context, rec Recovery) (RecoveryDecision, error)
	// MaxRecoveryAttempts caps the recoveries (and in-process retries of
	// retryable provider errors) of one turn without progress. It is one
	// budget with the fiber's: the turn keeps the fiber's attempt count
	// equal to its own (fiber.WithAttempts), so progress resets both.
	// Default and maximum: Fibers.MaxAttempts().
	MaxRecoveryAttempts int
	// AttemptWindow: recoveries without progress within this long of the
	// last counted attempt count as that attempt, so a burst of restarts
	// costs one. Default 30s; negative: every recovery counts.
	AttemptWindow time.Duration
	// StashInterval and StashChunks bound how stale a turn's stash may get:
	// it is stashed after this long or this many chunks since the last
	// stash, and when the provider's response id is first seen. Defaults 1s
	// and 64.
	StashInterval time.Duration
	StashChunks   int
	// RetryBackoff is the wait before continuing after a retryable provider
	// error, doubled per attempt. Default 200ms.
	RetryBackoff time.Duration
	// Tools are the agent's server tools: the model may call them, and the
	// turn runs each call as a fiber step keyed by its call id, so a
	// completed call never runs again (see the package doc). Nil: none.
	Tools *Tools
	// Turns bounds the turns running at once in the process, shared by
	// its agents; nil: no bound.
	Turns *TurnLimiter
	// MaxSteps caps the steps (model calls) of one turn; a turn that
	// reaches it ends with turn.completed "step-limit". Default 20.
	MaxSteps int
	// MaxParallelTools bounds the server tool calls of one step that run
	// at once. Default 4.
	MaxParallelTools int
	// ToolWaitTimeout bounds how long a call waits for its approval or
	// client result, from the end of the turn that left it waiting: a
	// later answer is refused with ErrWaitExpired, and the model is told
	// the call was not answered. Default 24h; negative: no limit.
	ToolWaitTimeout time.Duration
	// Peers reaches other agents for sub-agent calls (agent tools:
	// NewAgentTool, AgentTool) and tells a sub-agent's parent that its
	// turn ended. Nil: agent tools fail with a tool error, and a
	// sub-agent's parent learns of its end by polling.
	Peers Peers
	// MaxDepth bounds chains of sub-agent calls (DefaultMaxDepth, 5).
	MaxDepth int
	// ChildPoll is how often a turn awaiting its children reads their
	// state besides their notices. Default 10s.
	ChildPoll time.Duration
	// OnState, when set, is called after each SetState is stored, with
	// the new version and value, in version order (SetState calls are
	// serialized): agentd publishes the change to the agent's clients
	// (host.Env.PublishState). It must not block.
	OnState func(ctx context.Context, version int, value json.RawMessage)
	// OnLink, when set, is called after each sub-agent link event
	// (EventSubagentStarted, then EventSubagentEnded) is stored, with its
	// type and the link: agentd broadcasts it to the agent's watchers, so
	// a sub-agent's progress reaches them. A link appended again (a retry,
	// a recovered turn) is reported again. It must not block for long.
	OnLink func(ctx context.Context, typ string, l ChildLink)

	// Limiter, when set, is waited for before every model call: it
	// shares the model's rate limits between tenants, and a provider's
	// rate-limited answer waits there (honouring its Retry-After) rather
	// than counting as a failed attempt (ModelLimiter). Nil: calls go at
	// once.
	Limiter ModelLimiter

	// OnBudget, when set, is called when a turn parks at the soft budget
	// limit and when the park is approved or denied (budget_soft.go):
	// agentd broadcasts it and records it in the audit log. It must not
	// block for long.
	OnBudget func(ctx context.Context, n BudgetNotice)
	// SharedBudgets, when set, gives the budgets of the agent's user and
	// tenant, checked with its own (budget_shared.go). Nil: its own only.
	SharedBudgets SharedBudgets
	// Clock defaults to the system clock.
	Clock Clock
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Registerer receives the forever_chat_* metrics; nil: not registered.
	Registerer prometheus.Registerer
	// TracerProvider traces turns (invoke_agent), provider calls (chat)
	// and tool calls (execute_tool) with the GenAI semantic conventions
	// (see trace.go); nil: off.
	TracerProvider trace.TracerProvider
	// TraceContent records message contents in the spans: the prompts
	// and answers (gen_ai.input.messages, gen_ai.output.messages,
	// gen_ai.system_instructions) and tool arguments and results. Off by
	// default: they hold user data, and spans go to a tracing backend,
	// often a third party's, with other retention and access rules.
	TraceContent bool
	// Blobs stores payloads by reference: a message part's text, tool
	// input or output, or data over BlobThreshold bytes, and a tool
	// result over it, is stored once by its digest and the event holds
	// the reference. Nil: payloads stay inline (split into message.part
	// events when over one event).
	Blobs Blobs
	// BlobThreshold is the size above which a payload is stored by
	// reference. Default blob.DefaultThreshold (256 KiB).
	BlobThreshold int
	// BlobRefsWritable, when set, says whether references may be written
	// now: in a cluster, only once every node reads them (agentd's record
	// format switch); before, payloads stay inline. References already
	// stored are read either way. Nil: always.
	BlobRefsWritable func() bool
	// ChunkRefsWritable, when set, says whether a chunk may hold a
	// reference (chunk.Blobs) instead of a payload over the threshold: in
	// a cluster, only once every node reads them (agentd's
	// FormatChunkRefs); before, chunks carry their payloads inline. It
	// applies only while BlobRefsWritable does. Nil: always.
	ChunkRefsWritable func() bool
	// BatchesWritable, when set, says whether merge and debounce may
	// batch messages into one turn.started (its merged messages): in a
	// cluster, only once every node reads them (agentd's FormatBatches).
	// Before, a node of the previous release recovering a batch's queue
	// fibers would answer a joined message a second time, so the two
	// policies queue each message as enqueue does. Nil: always.
	BatchesWritable func() bool
	// ChunkBatchesWritable, when set and true, lets a turn store the
	// chunks it writes together (while the record before them waits to
	// be stored) as one packed record (chunk.PackChunks, chunk.EventChunks):
	// one message and one fsync instead of one each. In a cluster, only
	// once every node reads them (agentd's FormatChunkBatches). It is
	// asked when a turn's stream writer is made. Nil: never, unlike the
	// other switches: a packed record is read only by releases that know
	// it, so a program that embeds package chat turns it on itself.
	ChunkBatchesWritable func() bool
	// EndRecordsWritable, when set and true, lets a completed turn store
	// its assistant message and usage in its turn.completed (record
	// format 8) instead of a message.appended and a usage.recorded of
	// their own: its end chain is two records (turn.completed,
	// fiber.completed), two fsyncs fewer. In a cluster, only once every
	// node reads them (agentd's FormatEndRecords): a release before it
	// would miss the message and the usage. It is asked when a turn
	// ends. Nil: never, as ChunkBatchesWritable.
	EndRecordsWritable func() bool
	// AnnouncedStepsWritable, when set and true, lets the stash of a
	// step's usage before its tools carry the op.started of the step's
	// one call when that call is of an Idempotent server tool
	// (fiber.AnnounceStep, record format 9): the tool runs after one
	// round of writes (its input's chunks, the stash) instead of two, and
	// a tool call awaits two rounds, as a bare fiber.Step. In a cluster,
	// only once every node reads them (agentd's FormatAnnouncedSteps): a
	// release before it would run the call as a new op after a crash
	// (harmless for an Idempotent tool) and its verify would report the
	// op completed without op.started. It is asked when a step's model
	// call ends. Nil: never, as ChunkBatchesWritable.
	AnnouncedStepsWritable func() bool
	// InlineEndsWritable, when set and true, lets a turn's end chain be
	// one record: its turn.completed carries its fiber's end
	// (fiber.CompleteIn, record format 11) where a fiber.completed
	// followed it, one fsync fewer a turn. In a cluster, only once every
	// node reads them (agentd's FormatInlineEnds): a release before it
	// would see the turn's fiber still running and recover it. It is
	// asked when a turn ends. Nil: never, as ChunkBatchesWritable.
	InlineEndsWritable func() bool
	// AgentName is the agent's type as spans name it (gen_ai.agent.name,
	// "invoke_agent <AgentName>"). Default "chat".
	AgentName string
	// Price, when set, prices the turns' usage: usage.recorded and the
	// usage view carry a cost, and the chat spans a forever.usage.cost.
	// Nil: no cost is recorded.
	Price *cost.Price
	// Multitask is the policy of a Send that names none (multitask.go):
	// "" is MultitaskReject.
	Multitask Multitask
	// DebounceWindow is the quiet window of MultitaskDebounce: a batch's
	// turn starts once no message joined it for this long. 0 is
	// DefaultDebounceWindow; SendRequest.Debounce overrides it.
	DebounceWindow time.Duration
	// ContextTokens is the context budget of a model call, in tokens
	// (estimated at four bytes a token, llm.EstimateTokens): past it, the
	// model gets the system prompt, a summary of the older messages and
	// the newest messages that fit, and the conversation stays whole
	// (context.go). 0: the provider's default (llm.ContextTokensOf; none
	// for the local model); negative: no budget, the whole conversation.
	ContextTokens int
	// Summarize, when set, makes the summaries instead of the agent's
	// model: it gets the messages to summarise (the previous summary
	// first, as a user message, when there is one) and returns the text.
	// It runs as a fiber step, once per summary, like the model's.
	Summarize func(ctx context.Context, msgs []Message) (string, error)
}

func (c *Config) ensureDefaults() {
	if c.MaxPayload <= 0 {
		c.MaxPayload = DefaultMaxPayload
	}
	if c.MaxRecoveryAttempts == 0 && c.Fibers != nil {
		c.MaxRecoveryAttempts = c.Fibers.MaxAttempts()
	}
	if c.AttemptWindow == 0 {
		c.AttemptWindow = DefaultAttemptWindow
	}
	if c.StashInterval == 0 {
		c.StashInterval = DefaultStashInterval
	}
	if c.StashChunks == 0 {
		c.StashChunks = DefaultStashChunks
	}
	if c.RetryBackoff == 0 {
		c.RetryBackoff = DefaultRetryBackoff
	}
	if c.MaxSteps == 0 {
		c.MaxSteps = DefaultMaxSteps
	}
	if c.DebounceWindow == 0 {
		c.DebounceWindow = DefaultDebounceWindow
	}
	if c.MaxParallelTools == 0 {
		c.MaxParallelTools = DefaultMaxParallelTools
	}
	if c.ToolWaitTimeout == 0 {
		c.ToolWaitTimeout = DefaultToolWaitTimeout
	}
	if c.MaxDepth == 0 {
		c.MaxDepth = DefaultMaxDepth
	}
	if c.ChildPoll == 0 {
		c.ChildPoll = DefaultChildPoll
	}
	if c.Clock == nil {
		c.Clock = systemClock{}
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.OnChatRecovery == nil {
		c.OnChatRecovery = DefaultRecovery
	}
}

// Validate checks the config after defaults are applied.
func (c *Config) Validate() error {
	var missing []string
	if c.Log == nil {
		missing = append(missing, "Log")
	}
	if c.Store == nil {
		missing = append(missing, "Store")
	}
	if c.Batcher == nil {
		missing = append(missing, "Batcher")
	}
	if c.Fibers == nil {
		missing = append(missing, "Fibers")
	}
	if c.Provider == nil {
		missing = append(missing, "Provider")
	}
	switch {
	case !eventlog.ValidToken(c.Agent):
		return fmt.Errorf("%w: agent %q is not a valid subject token", ErrInvalidConfig, c.Agent)
	case len(missing) > 0:
		return fmt.Errorf("%w: %s required", ErrInvalidConfig, strings.Join(missing, ", "))
	case c.MaxRecoveryAttempts < 0 || c.StashChunks < 0 || c.StashInterval < 0 || c.RetryBackoff < 0 ||
		c.MaxSteps < 0 || c.MaxParallelTools < 0 || c.MaxDepth < 0 || c.ChildPoll < 0:
		return fmt.Errorf("%w: negative limit", ErrInvalidConfig)
	case c.DebounceWindow < 0:
		return fmt.Errorf("%w: negative DebounceWindow", ErrInvalidConfig)
	case c.Multitask != "" && !isMultitask(c.Multitask):
		return fmt.Errorf("%w: Multitask %q: %w", ErrInvalidConfig, c.Multitask, ErrMultitask)
	case c.Fibers.Agent() != c.Agent:
		return fmt.Errorf("%w: Fibers runs agent %q, not %q", ErrInvalidConfig, c.Fibers.Agent(), c.Agent)
	case c.MaxRecoveryAttempts > c.Fibers.MaxAttempts():
		return fmt.Errorf("%w: MaxRecoveryAttempts %d exceeds the fibers' MaxAttempts %d: the two caps count the same attempts",
			ErrInvalidConfig, c.MaxRecoveryAttempts, c.Fibers.MaxAttempts())
	}
	return nil
}

// Agent is one chat agent: its conversation, turns, state, usage and
// interrupt flags. It is safe for concurrent use.
//
// Its methods come in roles (see the package doc): the conversation's
// commands (commands: Send, Answer, Truncate, Rewrite, Cancel...), the
// budgets (budgets), the sub-agent calls of its turns (children), each a
// type the Agent embeds, whose methods are the Agent's; the turn slot
// (slot.go) and the start of a turn (turn_start.go) are the Agent's own,
// and a running turn is a turnRun.
type Agent struct {
	cfg     Config
	agent   string
	log     Log
	store   *Store
	logger  *slog.Logger
	metrics *metrics
	tracer  tracing.Tracer

	commands
	budgets
	children

	// stopAt, set only by tests, is called at each named crash point of a
	// step (see crashPoint).
	stopAt func(ctx context.Context, point string) error
	// onSlotMisuse, set only by tests, is told of a turn slot released
	// twice or not released by its owner (slotMisuse).
	onSlotMisuse func(requestID, what string)

	mu struct {
		sync.Mutex
		active *activeTurn // the turn this process runs, nil if none
	}
}

// New returns the Agent of cfg.Agent.
func New(cfg Config) (*Agent, error) {
	cfg.ensureDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	bm, err := newBudgetMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	a := &Agent{
		cfg: cfg, agent: cfg.Agent, log: cfg.Log, store: cfg.Store, metrics: m,
		logger: cfg.Logger.With("subsystem", "chat", "agent", cfg.Agent),
		tracer: tracing.New(cfg.TracerProvider, "chat"),
	}
	a.commands.a, a.budgets.a, a.budgetM, a.children.a = a, a, bm, a
	return a, nil
}

// ID returns the agent id.
func (a *Agent) ID() string { return a.agent }

// append appends one chat event for the agent and waits until the store
// shows it. An event too large for the log is refused before it is sent
// (ErrTooLarge), so it is never half-written.
func (a *Agent) append(ctx context.Context, typ string, v any) (eventlog.Seq, error) {
	e, err := a.event(typ, v)
	if err != nil {
		return 0, err
	}
	return a.appendAll(ctx, []eventlog.Event{e})
}

// event encodes one chat event for the agent, or returns ErrTooLarge when
// its data does not fit in one message of the server.
func (a *Agent) event(typ string, v any) (eventlog.Event, error) {
	e, err := eventlog.NewEvent(a.agent, typ, v)
	if err != nil {
		return e, err
	}
	if limit := a.dataLimit(); int64(len(e.Data)) > limit {
		return e, fmt.Errorf("%w: %s of %d bytes, at most %d fit in one event (server max payload %d): %w",
			ErrTooLarge, typ, len(e.Data), limit, a.cfg.MaxPayload, eventlog.ErrTooLarge)
	}
	return e, nil
}

// dataLimit is the largest event data the log takes: the max payload less
// room for the envelope, subject and headers.
func (a *Agent) dataLimit() int64 { return a.cfg.MaxPayload - 1024 }

// catchUp waits until the store has applied the agent's last event.
func (a *Agent) catchUp(ctx context.Context) error {
	last, err := a.log.LastSeq(ctx, eventlog.Filter{Agent: a.agent})
	if err != nil {
		return err
	}
	return a.store.WaitFor(ctx, last)
}

// Status is what the agent is doing.
type Status struct {
	Agent string `json:"agent"`
	// ActiveTurn is the turn streaming or waiting for recovery, nil if none.
	ActiveTurn *TurnInfo `json:"activeTurn,omitempty"`
	// LastTurn is the most recently started turn, nil before the first.
	LastTurn *TurnInfo `json:"lastTurn,omitempty"`
	// LastStream is the metadata of LastTurn's stream, nil when it has no
	// chunk yet.
	LastStream *chunk.StreamInfo `json:"lastStream,omitempty"`
	// Children are the sub-agent calls of ActiveTurn in flight.
	Children []ChildLink `json:"children,omitempty"`
	// PendingApprovals are the tool calls waiting for a person's approval
	// (Store.PendingApprovals).
	PendingApprovals []PendingApproval `json:"pendingApprovals"`
	// ModelWait is set while the active turn, running on this node,
	// waits for the model's rate limit (Config.Limiter).
	ModelWait *ModelWait `json:"modelWait,omitempty"`
}

// Tools describes the agent's server tools, sorted by name.
func (a *Agent) Tools() []ToolInfo { return a.cfg.Tools.Infos() }

// Status returns the agent's active and last turn and the last stream.
func (a *Agent) Status() (Status, error) {
	st, err := a.store.Status(a.agent)
	st.ModelWait = a.modelWaiting()
	return st, err
}

// Status returns agent's active and last turn, the last stream, the calls
// waiting for approval and the active turn's children in flight, as the
// views hold them: for any agent, whether an Agent of it runs in this
// process or not.
func (s *Store) Status(agent string) (Status, error) {
	st := Status{Agent: agent}
	pending, err := s.PendingApprovals(agent)
	if err != nil {
		return st, err
	}
	st.PendingApprovals = pending
	if t, ok, err := s.ActiveTurn(agent); err != nil {
		return st, err
	} else if ok {
		st.ActiveTurn = &t
		links, err := s.Links(agent, t.RequestID)
		if err != nil {
			return st, err
		}
		for _, l := range links {
			if !l.Ended() {
				st.Children = append(st.Children, l)
			}
		}
	}
	t, ok, err := s.LastTurn(agent)
	if err != nil || !ok {
		return st, err
	}
	st.LastTurn = &t
	info, err := s.Streams().Get(agent, t.StreamID)
	if errors.Is(err, chunk.ErrUnknownStream) {
		return st, nil
	}
	if err != nil {
		return st, err
	}
	st.LastStream = &info
	return st, nil
}
