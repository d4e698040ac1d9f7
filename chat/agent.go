package chat

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/forever-agents/forever/chat/chunk"
	"github.com/forever-agents/forever/chat/cost"
	"github.com/forever-agents/forever/chat/llm"
	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/fiber"
	"github.com/forever-agents/forever/tracing"
	"github.com/nats-io/nuid"
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
type Agent struct {
	cfg     Config
	agent   string
	log     Log
	store   *Store
	logger  *slog.Logger
	metrics *metrics
	budgetM *budgetMetrics
	tracer  tracing.Tracer

	stateMu sync.Mutex // serializes SetState
	mt      multitaskState
	soft    softWait // turns parked at the soft budget limit

	// stopAt, set only by tests, is called at each named crash point of a
	// step (see crashPoint).
	stopAt func(ctx context.Context, point string) error
	// onSlotMisuse, set only by tests, is told of a turn slot released
	// twice or not released by its owner (slotMisuse).
	onSlotMisuse func(requestID, what string)

	mu struct {
		sync.Mutex
		active *activeTurn // the turn this process runs, nil if none
		// waiters wake the turn waiting for a child turn, by the child's
		// request id (childWaiter).
		waiters map[string]chan struct{}
		// modelWait is set while the turn waits for Config.Limiter.
		modelWait *ModelWait
	}
}

// activeTurn is the in-process handle of the running turn.
type activeTurn struct {
	requestID string
	// pending (guarded by Agent.mu) is set while the command that holds
	// the slot has not stored its turn: it may yet be refused (a turn
	// recovering), and a recovery waits for it instead of failing.
	// resolved is closed once it stored its turn or gave the slot back.
	pending     bool
	resolved    chan struct{}
	resolveOnce sync.Once
	// ending is set once the turn's terminal chunk is durable: clients
	// have seen it end, and only its records remain to be appended. A new
	// turn waits for done (closed by release) instead of refusing.
	ending    atomic.Bool
	done      chan struct{}
	endOnce   sync.Once
	hold      slotHold                // released once, or kept (slot.go)
	admitted  bool                    // holds a slot of Config.Turns until released
	cancel    context.CancelCauseFunc // nil until the turn runs
	cancelled bool                    // Cancel came before the turn ran
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
	return &Agent{
		cfg: cfg, agent: cfg.Agent, log: cfg.Log, store: cfg.Store, metrics: m, budgetM: bm,
		logger: cfg.Logger.With("subsystem", "chat", "agent", cfg.Agent),
		tracer: tracing.New(cfg.TracerProvider, "chat"),
	}, nil
}

// ID returns the agent id.
func (a *Agent) ID() string { return a.agent }

// SendRequest is a user message and the request context of its turn.
type SendRequest struct {
	// Text is the message text; or set Message.
	Text string
	// Message is the user message (role user or empty, text parts). An
	// empty ID is RequestID, or a generated one without it.
	Message *Message
	// RequestID is the command's identity when the client's message has
	// no id: minted by the first node that received the command, and
	// passed along wherever the command goes (forwarded, retried,
	// re-routed across an ownership change). It becomes the turn's request
	// id, and the message's id when the message has none. At most 128
	// bytes of letters, digits and "-_.:"; empty: Send mints one (and the
	// command has no identity beyond this call).
	RequestID string
	// Body is the last request body (for example the AI SDK useChat body),
	// kept with the turn and handed to OnChatRecovery.
	Body json.RawMessage
	// Tools are client tool schemas offered to the model.
	Tools []llm.Tool
	// Multitask is what to do if a turn of the agent runs (or messages
	// wait in its queue): "" is Config.Multitask.
	Multitask Multitask
	// Parent is set when a sub-agent call of another agent's turn sends
	// the message: the turn records it, and tells the parent when it
	// ends. A parent whose chain of callers holds this agent is refused
	// (ErrInvalidMessage): a cycle.
	Parent *ParentRef
	// rewrite is set by Rewrite: the sequence of its truncation, which
	// makes the turn's event id differ from an earlier send of the same
	// message id.
	rewrite string
}

// Turn identifies a started turn.
type Turn struct {
	RequestID string `json:"requestId"`
	StreamID  string `json:"streamId"`
	// MessageID is the id of the assistant message the turn writes.
	MessageID string `json:"messageId"`
	// Cursor is a sequence of the chunks stream to follow the turn's
	// stream after: for a new turn, the agent's last chunk before the
	// turn's first (so following all of the agent's chunks from it, as
	// agentd tail --from does, starts at the turn), and 0 when that could
	// not be read or the Send answered a copy of a command; 0 follows the
	// stream's own subject from its first chunk.
	Cursor eventlog.Seq `json:"cursor"`
}

// Send stores the user message and starts a turn answering it, as a
// background fiber named TurnFiberPrefix+requestId. The message is stored
// in the turn's turn.started, so neither is ever stored without the other.
// It returns once the fiber and turn.started are durable: an acknowledged
// Send is never lost, and a crash from then on is recovered. A Send that
// fails may have stored its turn (the log did not confirm it); it then
// runs, or recovery runs it.
//
// A command runs once: its identity is the message's id, or RequestID
// (see SendRequest). A Send whose message id, or request id, is already
// stored with its turn starts nothing and returns that turn (the
// original's requestId, streamId and messageId, cursor 0), also while the
// turn runs. The store refuses a second copy: turn.started's event id is
// derived from the agent and the message id, so JetStream drops a copy
// appended within its duplicate window (2 minutes) whatever node sends it;
// after the window the conversation itself (checked after catching up with
// the log, under the agent's turn slot, by its one fenced owner) finds the
// original. A message removed by Truncate no longer counts, unless
// the command carries its RequestID, whose turn stays.
//
// One turn runs at a time per agent: Send while another turn streams (or
// waits for recovery) follows req.Multitask (multitask.go); by default it
// returns ErrTurnActive and does not queue. A stale "turn" interrupt flag
// is cleared first, so it cannot abort the new turn.
//
// Errors: ErrEmptyMessage, ErrInvalidMessage (bad input),
// ErrDuplicateMessage (the message id is another message's, or the request
// id another message's turn), ErrTurnActive, ErrTooLarge, ErrMultitask, or
// a log error.
func (a *Agent) Send(ctx context.Context, req SendRequest) (Turn, error) {
	if req.RequestID != "" && !validRequestID(req.RequestID) {
		return Turn{}, fmt.Errorf("%w: request id %q: want 1 to %d letters, digits or \"-_.:\"", ErrInvalidMessage, req.RequestID, maxRequestID)
	}
	if err := a.checkParent(req.Parent); err != nil {
		return Turn{}, err
	}
	msg, err := a.userMessage(req)
	if err != nil {
		return Turn{}, err
	}
	// A retried command whose turn the views already show.
	if orig, ok, err := a.sent(msg.ID, req.RequestID); err != nil || ok {
		return orig, err
	}
	return a.admit(ctx, req, msg) // the multitask policy: multitask.go
}

// sendNow starts msg's turn, or returns ErrTurnActive.
func (a *Agent) sendNow(ctx context.Context, req SendRequest, msg Message) (Turn, error) {
	t := turnStarted{
		RequestID: cmp.Or(req.RequestID, nuid.Next()), StreamID: nuid.Next(), MessageID: msg.ID,
		AssistantMessageID: nuid.Next(), Body: req.Body, Tools: req.Tools, Parent: req.Parent,
		rewrite: req.rewrite,
	}
	msg.RequestID = t.RequestID
	t.Message = &msg
	turn, err := a.start(ctx, t, &msg, nil, "")
	if errors.Is(err, ErrTurnActive) || errors.Is(err, eventlog.ErrDuplicate) {
		// Refused while its original runs, or stored by another node
		// meanwhile: the original's reply, once the views show it.
		if cerr := a.catchUp(ctx); cerr == nil {
			if orig, ok, serr := a.sent(msg.ID, req.RequestID); serr == nil && ok {
				return orig, nil
			}
		}
	}
	return turn, err
}

// maxRequestID bounds a caller's request id.
const maxRequestID = 128

// validRequestID reports whether id can be a request id: it names a fiber
// and keys the views.
func validRequestID(id string) bool {
	if len(id) == 0 || len(id) > maxRequestID {
		return false
	}
	for _, c := range []byte(id) {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '_', c == '.', c == ':':
		default:
			return false
		}
	}
	return true
}

// sent returns the turn a Send of message msgID (or with request id
// requestID, when set) started before, if the views show one.
// ErrDuplicateMessage: the id is taken by another message, or the request
// id by another message's turn.
func (a *Agent) sent(msgID, requestID string) (Turn, bool, error) {
	if requestID != "" {
		info, err := a.store.Turn(a.agent, requestID)
		switch {
		case err == nil && info.MessageID == msgID:
			return turnOf(info), true, nil
		case err == nil:
			return Turn{}, false, fmt.Errorf("%w: request id %q is the turn of message %q, not %q", ErrDuplicateMessage, requestID, info.MessageID, msgID)
		case !errors.Is(err, ErrNotFound):
			return Turn{}, false, err
		}
	}
	m, err := a.store.Message(a.agent, msgID)
	if errors.Is(err, ErrNotFound) {
		return Turn{}, false, nil
	}
	if err != nil {
		return Turn{}, false, err
	}
	if m.Role != RoleUser || m.RequestID == "" {
		return Turn{}, false, fmt.Errorf("%w: %q is the id of another message", ErrDuplicateMessage, msgID)
	}
	info, err := a.store.Turn(a.agent, m.RequestID)
	if errors.Is(err, ErrNotFound) {
		return Turn{}, false, fmt.Errorf("%w: message %q is stored without its turn", ErrDuplicateMessage, msgID)
	}
	if err != nil {
		return Turn{}, false, err
	}
	return turnOf(info), true, nil
}

// turnOf is the reply to the command that started the turn info.
func turnOf(info TurnInfo) Turn {
	return Turn{RequestID: info.RequestID, StreamID: info.StreamID, MessageID: info.AssistantMessageID}
}

// sendEventID is the event id (JetStream's Nats-Msg-Id) of the
// turn.started of the Send of message msgID: the same for every copy of
// the command, so the stream stores one within its duplicate window.
func sendEventID(agent, msgID string) string {
	h := sha256.Sum256([]byte(agent + "\x00send\x00" + msgID))
	return "send-" + hex.EncodeToString(h[:16])
}

func (a *Agent) userMessage(req SendRequest) (Message, error) {
	if req.Body != nil && !json.Valid(req.Body) {
		return Message{}, fmt.Errorf("%w: body is not JSON", ErrInvalidMessage)
	}
	var m Message
	switch {
	case req.Message != nil && req.Text != "":
		return Message{}, fmt.Errorf("%w: set Text or Message, not both", ErrInvalidMessage)
	case req.Message != nil:
		m = *req.Message
		m.Parts = append([]Part(nil), m.Parts...)
	default:
		m = Message{Parts: []Part{{Type: PartText, Text: req.Text}}}
	}
	if m.Role == "" {
		m.Role = RoleUser
	}
	if m.Role != RoleUser {
		return Message{}, fmt.Errorf("%w: role %q, want %q", ErrInvalidMessage, m.Role, RoleUser)
	}
	for _, p := range m.Parts {
		if p.Type != PartText {
			return Message{}, fmt.Errorf("%w: part type %q in a user message", ErrInvalidMessage, p.Type)
		}
	}
	if strings.TrimSpace(partsText(m.Parts)) == "" {
		return Message{}, ErrEmptyMessage
	}
	if m.ID == "" {
		m.ID = cmp.Or(req.RequestID, nuid.Next())
	}
	if m.CreatedAt.IsZero() {
		m.CreatedAt = a.cfg.Clock.Now().UTC()
	}
	return m, nil
}

// start claims the agent's turn slot, starts the turn fiber gated on the
// appends, appends turn.started (which carries the user message, if any),
// and opens the gate.
//
// The turn's invoke_agent span starts here, under ctx's span or, for a
// turn answering a waiting call, under follows (the traceparent of the
// turn that asked), and is recorded in turn.started; the run that records
// the turn's outcome ends it.
func (a *Agent) start(ctx context.Context, t turnStarted, msg *Message, base []Part, follows string) (Turn, error) {
	if t.Version == "" {
		t.Version = a.cfg.Fibers.Version()
	}
	at := newActiveTurn(t.RequestID)
	at.pending = true
	a.mu.Lock()
	for a.mu.active != nil {
		cur := a.mu.active
		pending := cur.pending
		a.mu.Unlock()
		if pending {
			// The turn that holds the slot has not stored its turn.started
			// yet (its fate may be unknown, being settled): a copy of its
			// command waits to be answered with it, and another command to
			// learn whether it runs, rather than be refused while it may
			// yet be refused itself.
			if err := waitResolved(ctx, cur); err != nil {
				return Turn{}, err
			}
			a.mu.Lock()
			if a.mu.active == cur {
				a.mu.Unlock()
				return Turn{}, fmt.Errorf("%w: turn %s runs", ErrTurnActive, cur.requestID)
			}
			continue
		}
		if err := waitEnding(ctx, cur); err != nil {
			return Turn{}, err
		}
		a.mu.Lock()
	}
	if err := a.cfg.Turns.acquire(false); err != nil {
		a.mu.Unlock()
		return Turn{}, err
	}
	at.admitted = true
	a.mu.active = at
	a.mu.Unlock()
	ok := false
	defer func() {
		if !ok {
			a.release(at)
		}
	}()
	if err := a.crashPoint(ctx, pointSendBegin); err != nil {
		return Turn{}, err
	}
	if err := a.catchUp(ctx); err != nil {
		return Turn{}, err
	}
	if msg != nil {
		// Under the slot, caught up with the log: the check that decides.
		if orig, ok, err := a.sent(msg.ID, t.RequestID); err != nil || ok {
			return orig, err
		}
	}
	// Check sizes first: nothing is half-written for being too large.
	if _, err := a.event(EventTurnStarted, t); err != nil {
		return Turn{}, err
	}
	if cur, active, err := a.store.ActiveTurn(a.agent); err != nil {
		return Turn{}, err
	} else if active && !cur.Orphaned {
		return Turn{}, fmt.Errorf("%w: turn %s waits for recovery", ErrTurnActive, cur.RequestID)
	} else if active {
		// Its fiber ended without recording the outcome (the log failed
		// then): end it now rather than refuse every later turn.
		if err := a.endTurn(ctx, cur.RequestID, fmt.Sprintf("chat: turn %s ended without an outcome: its fiber ended (%s)", cur.RequestID, cur.FiberError)); err != nil {
			return Turn{}, err
		}
	}
	if err := a.crashPoint(ctx, pointSendChecked); err != nil {
		return Turn{}, err
	}
	// The turn's span: the fiber records it in fiber.started, turn.started
	// in its data.
	ctx, span := a.startTurnSpan(ctx, &t, msg, follows)
	// The gate says what the fiber does: run the turn once the views show
	// seq; end at once (errNotStored: nothing was stored); or stay for
	// recovery (another error), which finds out from the log whether
	// turn.started was stored.
	gate := make(chan started, 1)
	fid, err := a.cfg.Fibers.Go(ctx, TurnFiberPrefix+t.RequestID, func(fctx context.Context, f *fiber.Fiber) error {
		var g started
		select {
		case g = <-gate:
		case <-fctx.Done():
			return fctx.Err()
		}
		if g.settle == nil && errors.Is(g.err, errNotStored) {
			// The command stored nothing and gives the slot back itself.
			a.endTurnSpan(fctx, span, errNotStored)
			return nil
		}
		// The slot is the fiber's from here: released once, or kept.
		defer a.checkSlot(at, "turn fiber")
		if g.settle != nil {
			// The command's turn.started may be stored, now or later: the
			// turn keeps its slot until the log says which.
			g = a.settleStart(fctx, at, *g.settle)
			if g.err != nil && !errors.Is(g.err, errNotStored) {
				// Still unknown: left for recovery (the host restarts the
				// agent), holding the slot meanwhile.
				a.keepSlot(at, "its turn.started's fate is unknown")
				a.endTurnSpan(fctx, span, g.err)
				return g.err
			}
		}
		if errors.Is(g.err, errNotStored) {
			a.release(at)
			a.endTurnSpan(fctx, span, errNotStored)
			return nil // nothing was started; the fiber just ends
		}
		if g.err == nil {
			g.err = a.store.WaitFor(fctx, g.seq)
		}
		if g.err != nil {
			a.release(at)
			return g.err
		}
		info, err := a.store.Turn(a.agent, t.RequestID)
		if err != nil {
			a.release(at)
			err = a.endOnFailure(fctx, t.RequestID, err)
			a.endTurnSpan(fctx, span, err)
			return err
		}
		st := &turnState{at: at, info: info, b: turnBuilder(info), base: base, snap: snapshot{StreamID: t.StreamID, RequestID: t.RequestID}, span: span}
		err = a.endOnFailure(fctx, t.RequestID, a.runTurn(fctx, f, st))
		a.endTurnSpan(fctx, span, err)
		return a.afterTurn(fctx, t.RequestID, err)
	}, fiber.Unique())
	if errors.Is(err, fiber.ErrNameTaken) {
		// A fiber of this turn's name is left for recovery, or being
		// recovered: the command waits for it (busy), and Send answers a
		// copy with the turn once the recovery shows it stored.
		failSpan(span, err)
		return Turn{}, fmt.Errorf("%w: turn %s is being recovered; send the command again", ErrTurnActive, t.RequestID)
	}
	if err != nil {
		failSpan(span, err)
		return Turn{}, fmt.Errorf("chat: start turn: %w", err)
	}
	t.FiberID = fid
	seq, e, err := a.startAppends(ctx, t, msg)
	if err != nil {
		ferr := startFailed(err)
		if errors.Is(ferr, errNotStored) {
			gate <- started{err: ferr}
			return Turn{}, err
		}
		// Sent, and no answer came: turn.started may be stored, now or
		// later (JetStream answers late while a stream elects its
		// leader). Letting the slot go would let a copy of the command,
		// or another one, start a second turn beside it; so the turn
		// holds it (pending) and its fiber settles the write. The
		// caller learns the write is unconfirmed; a copy sent meanwhile
		// waits for it (waitResolved), and is answered with this turn once
		// stored.
		ok = true
		a.logger.Warn("turn.started not confirmed; the turn keeps its slot while its fiber settles the write", "request", t.RequestID, "err", err)
		gate <- started{settle: &e}
		return Turn{}, fmt.Errorf("%w: turn %s is being confirmed; send the command again for its answer", eventlog.ErrUnconfirmed, t.RequestID)
	}
	// Stored: the turn is the fiber's from here, whatever becomes of ctx.
	ok = true
	a.mu.Lock()
	at.pending = false
	a.mu.Unlock()
	at.resolve()
	if err := a.crashPoint(ctx, pointSendStored); err != nil {
		return Turn{}, err
	}
	// The stream's real start: the agent's last chunk before the turn's
	// first, which cannot be written before the gate opens (one turn runs
	// at a time). A failed read leaves 0, which follows the stream's own
	// subject from its first chunk just as well.
	cursor, _ := a.log.LastSeq(ctx, eventlog.Filter{Agent: a.agent, Chunks: true})
	if cursor > 0 {
		// Across an ownership change the turn may have run elsewhere
		// already (this node stored it, then lost the agent, and the new
		// owner recovered it): a cursor after its chunks would follow
		// nothing. 0 follows the stream from its first chunk.
		if own, err := a.log.LastSeq(ctx, eventlog.Filter{Agent: a.agent, Stream: t.StreamID, Chunks: true}); err != nil || own > 0 {
			cursor = 0
		}
	}
	gate <- started{seq: seq}
	if err := a.store.WaitFor(ctx, seq); err != nil {
		return Turn{}, err
	}
	return Turn{RequestID: t.RequestID, StreamID: t.StreamID, MessageID: t.AssistantMessageID, Cursor: cursor}, nil
}

// started is what a turn fiber is told once its command's appends are
// done: the sequence to wait for, or why it must not run.
type started struct {
	seq eventlog.Seq
	err error
	// settle, when set, is the turn.started whose append's fate is
	// unknown: the fiber settles it (settleStart) before anything else.
	settle *eventlog.Event
}

// settleStart settles e, the turn.started of the turn at holds the slot
// for, whose append's fate is unknown: the slot stays pending until the
// log says where, or whether, it is stored. Stored: the turn is the
// fiber's and runs. Refused: nothing was started. Still unknown (the
// bound or the Runner ended first): the fiber is left for recovery, which
// reads the log, and the slot stays taken until the agent restarts, so
// nothing starts beside a turn that may yet land.
func (a *Agent) settleStart(ctx context.Context, at *activeTurn, e eventlog.Event) started {
	sctx, cancel := context.WithTimeout(ctx, settleWithin)
	defer cancel()
	seq, err := eventlog.Settle(sctx, a.log, e)
	switch {
	case err == nil:
		a.logger.Info("turn.started settled: stored", "request", at.requestID, "seq", seq)
		a.mu.Lock()
		at.pending = false
		a.mu.Unlock()
		at.resolve()
		return started{seq: seq}
	case errors.Is(startFailed(err), errNotStored):
		a.logger.Info("turn.started settled: not stored", "request", at.requestID, "err", err)
		return started{err: errNotStored}
	}
	return started{err: fmt.Errorf("%w: start turn %s: %w", eventlog.ErrUnconfirmed, at.requestID, err)}
}

// settleWithin bounds the settling of a turn.started whose fate is
// unknown: well within JetStream's duplicate window (2 minutes by
// default), which makes the copies Settle sends harmless.
const settleWithin = time.Minute

// errNotStored marks a failure to start a turn that stored nothing of it.
var errNotStored = errors.New("chat: the turn was not stored")

// startFailed is what a turn fiber is told when the appends that start
// its turn failed with err: errNotStored when turn.started cannot have
// been stored, else an error that leaves the fiber for recovery
// (fiber.LogFailed), since it may be in the log.
func startFailed(err error) error {
	switch {
	case errors.Is(err, errNotStored), errors.Is(err, eventlog.ErrDuplicate), eventlog.Refused(err):
		// Refused (JetStream answered: over the tenant's storage, a
		// limit; or the log did not send it): nothing of it is stored,
		// now or later, so the slot goes at once and the caller gets the
		// refusal (429 over quota, 503), not an unknown fate (504).
		return errNotStored
	case fiber.LogFailed(err):
		return err
	}
	return fmt.Errorf("%w: start the turn: %w", eventlog.ErrUnconfirmed, err)
}

// startAppends appends what starts a turn and returns the sequence the
// views must reach: interrupt.cleared for a stale "turn" interrupt (it
// must not abort the new turn), then turn.started, which carries the user
// message (msg) of a Send, so that the message and its turn are stored
// together or not at all. (Earlier releases also wrote the message as a
// message.appended of its own, for nodes that did not read it from
// turn.started yet.) An error wraps errNotStored when it came before
// turn.started was sent.
func (a *Agent) startAppends(ctx context.Context, t turnStarted, msg *Message) (eventlog.Seq, eventlog.Event, error) {
	if err := a.ClearInterrupt(ctx, InterruptTurn); err != nil {
		return 0, eventlog.Event{}, fmt.Errorf("%w: %w", errNotStored, err)
	}
	t, err := a.offloadTurnStarted(ctx, t)
	if err != nil {
		return 0, eventlog.Event{}, fmt.Errorf("%w: %w", errNotStored, err)
	}
	e, err := a.event(EventTurnStarted, t)
	if err != nil {
		return 0, e, fmt.Errorf("%w: %w", errNotStored, err) // not sent
	}
	// The id is fixed before the append, so a copy that settles an
	// unknown fate is the same event to JetStream.
	e.ID = nuid.Next()
	if msg != nil {
		e.ID = sendEventID(a.agent, msg.ID)
		if t.rewrite != "" {
			e.ID = sendEventID(a.agent, msg.ID+"\x00rewrite\x00"+t.rewrite)
		}
	}
	seq, err := a.log.Append(ctx, e)
	if err != nil {
		return 0, e, fmt.Errorf("chat: append %s: %w", EventTurnStarted, err)
	}
	if msg != nil {
		if err := a.crashPoint(ctx, pointSendTurnStored); err != nil {
			return 0, e, err
		}
	}
	return seq, e, nil
}

// waitEnding waits for cur, a turn whose stream has ended, to append its
// records (a few ms): a client that saw the end and sent the next message
// at once (the AI SDK does, answering a tool call) waits for it. A turn
// still streaming is ErrTurnActive at once.
func waitEnding(ctx context.Context, cur *activeTurn) error {
	if !cur.ending.Load() {
		return ErrTurnActive
	}
	select {
	case <-cur.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(endingWait):
		return fmt.Errorf("%w: turn %s is still recording its end", ErrTurnActive, cur.requestID)
	}
}

// waitResolved waits, bounded by endingWait, for cur, a turn that holds
// the slot without having stored its turn.started, to store it or give the
// slot back: a few ms, or as long as an append of unknown fate takes to
// settle. Past the bound it is ErrTurnActive.
func waitResolved(ctx context.Context, cur *activeTurn) error {
	select {
	case <-cur.resolved:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(endingWait):
		return fmt.Errorf("%w: turn %s is being confirmed", ErrTurnActive, cur.requestID)
	}
}

// settle waits for the turn that runs, if its stream has ended, to record
// its end, so what the client saw in the stream is in the views. A turn
// still streaming is left alone: the caller's own checks refuse it.
func (a *Agent) settle(ctx context.Context) error {
	a.mu.Lock()
	cur := a.mu.active
	a.mu.Unlock()
	if cur == nil || !cur.ending.Load() {
		return nil
	}
	return waitEnding(ctx, cur)
}

// Settle waits, bounded, for the running turn, if its stream has ended, to
// record its end (its final assistant message, usage and outcome), so a
// read that follows sees what the stream showed: the AI SDK reads the
// conversation as soon as it reads the finish chunk, and a turn appends its
// final message after that chunk. A turn still streaming is not waited
// for; a turn that does not record its end within the bound is ErrTurnActive.
func (a *Agent) Settle(ctx context.Context) error { return a.settle(ctx) }

// endingWait bounds how long a new turn waits for the previous one to
// record its end after its terminal chunk.
const endingWait = 10 * time.Second

func newActiveTurn(requestID string) *activeTurn {
	return &activeTurn{requestID: requestID, done: make(chan struct{}), resolved: make(chan struct{})}
}

// resolve tells recoveries waiting for the slot that the command holding
// it stored its turn or gave the slot back.
func (at *activeTurn) resolve() { at.resolveOnce.Do(func() { close(at.resolved) }) }

// ended marks the turn's stream ended (its terminal chunk durable).
// A turn ended outside a run (abandoned) has no activeTurn.
func (at *activeTurn) ended() {
	if at != nil {
		at.ending.Store(true)
	}
}

// release frees the turn slot if at holds it. Its owner calls it once: a
// second call is reported (slotMisuse) and changes nothing.
func (a *Agent) release(at *activeTurn) {
	if !at.hold.release() {
		a.slotMisuse(at, "released twice")
		return
	}
	defer a.mt.notify() // queued messages and interrupting Sends look again
	defer at.endOnce.Do(func() { close(at.done) })
	defer at.resolve()
	a.mu.Lock()
	if a.mu.active == at {
		a.mu.active = nil
	}
	admitted := at.admitted
	at.admitted = false
	a.mu.Unlock()
	if admitted {
		a.cfg.Turns.release()
	}
}

// claim takes the turn slot for a recovered turn. A command that holds
// the slot without having stored its turn is waited for, whatever its
// identity: a command of another finds the recovering turn active and is
// refused (ErrTurnActive), so a command refused with 409 never fails the
// turn being recovered; a copy of the recovered turn's own command is
// answered with it (Send), and never runs it beside the recovery. A turn
// that runs is ErrTurnActive, or errRunsHere when it is the recovered
// turn itself: another fiber of this process runs it already.
func (a *Agent) claim(ctx context.Context, requestID string) (*activeTurn, error) {
	at := newActiveTurn(requestID)
	a.mu.Lock()
	defer a.mu.Unlock()
	for cur := a.mu.active; cur != nil; cur = a.mu.active {
		if !cur.pending && cur.requestID == requestID {
			return nil, fmt.Errorf("%w: turn %s", errRunsHere, requestID)
		}
		if !cur.pending {
			return nil, fmt.Errorf("%w: %s runs while %s is recovered", ErrTurnActive, cur.requestID, requestID)
		}
		a.mu.Unlock()
		select {
		case <-cur.resolved:
		case <-ctx.Done():
			a.mu.Lock()
			return nil, ctx.Err()
		}
		a.mu.Lock()
	}
	// Admitted before the crash: it must complete, past the bound if need be.
	_ = a.cfg.Turns.acquire(true)
	at.admitted = true
	a.mu.active = at
	return at, nil
}

// errRunsHere is claim's answer to the recovery of a turn that a fiber of
// this process runs already: the recovering fiber (a second fiber of the
// turn, whose fiber.started landed late) ends and leaves the turn alone.
var errRunsHere = errors.New("chat: the turn runs in another fiber of this process")

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

// Messages returns a page of the visible conversation; see Store.Messages.
func (a *Agent) Messages(p Page) ([]Message, string, error) { return a.store.Messages(a.agent, p) }

// Usage returns the agent's usage roll-up.
func (a *Agent) Usage() (Usage, error) { return a.store.Usage(a.agent) }

// State returns the agent's state value and version (nil, 0 before the
// first SetState).
func (a *Agent) State() (json.RawMessage, int, error) { return a.store.State(a.agent) }

// maxStateTries bounds SetState's retries when other events of the agent
// keep landing between its read and its append.
const maxStateTries = 16

// SetState replaces the agent's state with value if its version is
// expectVersion (0 before the first SetState) and returns the new version,
// expectVersion+1. The check is fenced by the log: state.set is appended
// with the agent's last event sequence expected, so of two concurrent
// SetState calls with the same expected version (in any processes) exactly
// one wins; the other returns ErrVersionConflict.
//
// Errors: ErrInvalidMessage (value is not JSON), ErrVersionConflict, or a
// log error.
func (a *Agent) SetState(ctx context.Context, value json.RawMessage, expectVersion int) (int, error) {
	if !json.Valid(value) {
		return 0, fmt.Errorf("%w: state is not JSON", ErrInvalidMessage)
	}
	a.stateMu.Lock()
	defer a.stateMu.Unlock()
	for range maxStateTries {
		last, err := a.log.LastSeq(ctx, eventlog.Filter{Agent: a.agent})
		if err != nil {
			return 0, err
		}
		if err := a.store.WaitFor(ctx, last); err != nil {
			return 0, err
		}
		_, ver, err := a.store.State(a.agent)
		if err != nil {
			return 0, err
		}
		if ver != expectVersion {
			return 0, fmt.Errorf("%w: version is %d, expected %d", ErrVersionConflict, ver, expectVersion)
		}
		e, err := eventlog.NewEvent(a.agent, EventStateSet, stateSet{Version: ver + 1, Value: value})
		if err != nil {
			return 0, err
		}
		seq, err := a.log.Append(ctx, e, eventlog.ExpectSeq(last))
		if errors.Is(err, eventlog.ErrConflict) {
			continue // another event of the agent came first: check again
		}
		if err != nil {
			return 0, fmt.Errorf("chat: append %s: %w", EventStateSet, err)
		}
		if a.cfg.OnState != nil {
			a.cfg.OnState(ctx, ver+1, value)
		}
		return ver + 1, a.store.WaitFor(ctx, seq)
	}
	return 0, fmt.Errorf("%w: the agent's events kept changing, try again", ErrVersionConflict)
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
