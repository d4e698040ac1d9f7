package chathost

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/forever-agents/forever/agentd"
	"github.com/forever-agents/forever/agentd/host"
	"github.com/forever-agents/forever/agentd/quota"
	"github.com/forever-agents/forever/auth"
	"github.com/forever-agents/forever/blob"
	"github.com/forever-agents/forever/chat"
	"github.com/forever-agents/forever/chat/chunk"
	"github.com/forever-agents/forever/chat/cost"
	"github.com/forever-agents/forever/chat/llm"
	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/fiber"
	"github.com/forever-agents/forever/internal/apierror"
	"github.com/forever-agents/forever/modellimit"
	"github.com/forever-agents/forever/replay"
)

// Verbs are the command verbs of the chat agent type, besides the host's
// (host.Verbs): register it with them, in its host.TypeSpec.
var Verbs = []string{"chat", "messages", "cancel", "interrupt", "state", "approve", "tool-result", "tools", "approvals", "streams", "usage", "budget", "child-result", "child-turn"}

// InternalVerbs are the Verbs chat agents send one another, not clients:
// child-result, a sub-agent's notice to its parent, and child-turn, a
// parent's read of its child's turn on the child's owner (with owned
// views) (host.TypeSpec.Internal).
var InternalVerbs = []string{"child-result", "child-turn"}

// Type is the chat agent type: it opens the chat read side (the
// projections of messages, streams, turns, state, usage, interrupts) and the
// shared chunk batcher when the daemon starts, and builds one chat.Agent per
// agent id.
type Type struct {
	provider llm.Provider
	config   func(*chat.Config) // optional tweaks, for embedding programs

	// Set at start.
	log     *eventlog.Log
	store   *chat.Store
	batcher *eventlog.Batcher
	// live publishes each stored chunk to the gateways following its
	// stream (chunk.Live), so a follow of a running turn creates no
	// JetStream consumer.
	live          *chunk.Live
	maxPayload    int64
	registerer    prometheus.Registerer
	turns         *chat.TurnLimiter // --max-turns, shared by the node's chat agents
	turnQuota     int               // the tenant's turns quota when it binds, else 0
	node          *chat.TurnLimiter // ShareTurns's, else nil
	logger        *slog.Logger
	tp            trace.TracerProvider
	content       bool        // --trace-content
	price         *cost.Price // the provider's model's, from --prices
	blobs         *blob.Store
	blobTh        int // --blob-threshold
	sweeper       *blob.Sweeper
	contextTokens int // --context-tokens
	// refsWritable reports whether the cluster's record format lets
	// references be written (agentd.FormatBlobRefs).
	refsWritable func() bool
	// chunkRefsWritable reports whether chunks may hold references
	// (agentd.FormatChunkRefs).
	chunkRefsWritable func() bool
	// batchesWritable reports whether merge and debounce may batch
	// messages into one turn (agentd.FormatBatches).
	batchesWritable func() bool
	// chunkBatchesWritable reports whether a turn may pack the chunks it
	// writes together into one record (agentd.FormatChunkBatches).
	chunkBatchesWritable func() bool
	// endRecordsWritable reports whether a completed turn may store its
	// message and usage in its turn.completed (agentd.FormatEndRecords).
	endRecordsWritable func() bool
	// announcedStepsWritable reports whether a step's usage stash may
	// carry its Idempotent tool call's op.started
	// (agentd.FormatAnnouncedSteps).
	announcedStepsWritable func() bool
	// inlineEndsWritable reports whether a turn's turn.completed may
	// carry its fiber's end (agentd.FormatInlineEnds).
	inlineEndsWritable func() bool
	// shared gives the tenant's and its users' budgets (nil: none).
	shared  *sharedBudgets
	limiter *modellimit.Limiter // ShareModelLimiter's, else nil
	limit   *modellimit.Tenant  // this tenant's handle on it, set at start
}

// ShareModelLimiter makes the type's turns wait for l before each model
// call, as the tenant the daemon serves (DefaultTenant without tenancy)
// with its quota's model weight: l is shared by every chat type of the
// process, so its tenants share the model's rate limits fairly, and its
// share of the cluster's bounds follows the live nodes. Call it before
// the daemon starts.
func (ct *Type) ShareModelLimiter(l *modellimit.Limiter) { ct.limiter = l }

// DefaultTenant is the limiter's name for a daemon without tenancy.
const DefaultTenant = "default"

// ShareTurns makes the type's turns also hold slots of node, a limiter
// shared by every chat type of the process: the tenants' daemons of one
// agentd share its --max-turns (429 past it), each within its own turns
// quota (429 past it). Call it before the daemon starts.
func (ct *Type) ShareTurns(node *chat.TurnLimiter) { ct.node = node }

// NewType returns the chat type over provider. tweak, when not nil, may
// change each agent's chat.Config (system prompt, recovery hook...).
func NewType(provider llm.Provider, tweak func(*chat.Config)) *Type {
	return &Type{provider: provider, config: tweak}
}

// Attach opens the chat read side and the chunk batcher with d.
func (ct *Type) Attach(d *agentd.Daemon) error {
	return d.OnStart(func(ctx context.Context, deps *agentd.Deps) error {
		store, streams, err := chat.AddStore(deps.Log, deps.Views)
		if err != nil {
			return err
		}
		if err := d.AddProjector(streams); err != nil {
			return err
		}
		ct.store, ct.maxPayload, ct.registerer, ct.log = store, deps.Log.MaxPayload(), deps.Registerer, deps.Log
		ct.logger = deps.Logger
		ct.tp, ct.content = deps.Config.TracerProvider, deps.Config.TraceContent
		ct.contextTokens = deps.Config.ContextTokens
		if ct.shared, err = newSharedBudgets(deps); err != nil {
			return err
		}
		prices, err := cost.Load(deps.Config.Prices)
		if err != nil {
			return agentd.ConfigErrorf("prices", "prices file %s: %s", deps.Config.Prices, strings.TrimPrefix(err.Error(), "cost: "))
		}
		price, model, ok := priceOf(prices, ct.provider)
		if !ok {
			deps.Logger.Warn("no price for the chat model: its usage costs 0 (set one with --prices)", "provider", ct.provider.Name(), "model", model)
		}
		ct.price = &price
		if ct.limiter != nil {
			name := DefaultTenant
			if deps.Config.Tenant != nil {
				name = deps.Config.Tenant.Name
			}
			ct.limit = ct.limiter.Tenant(name, deps.Quotas.Quota().Weight())
			if deps.Ownership != nil {
				ct.limiter.ShareAmong(deps.Ownership.Nodes)
			}
		}
		if own := deps.Ownership; own != nil {
			// A node of the previous release recovering a batch's
			// queue fibers would answer a joined message again.
			ct.batchesWritable = func() bool { return own.ActiveFormat() >= agentd.FormatBatches }
			// A node of the previous release reads no packed record:
			// its recovery, gateway and verify would miss the chunks.
			// Opt-in (--pack-chunks): packed records make chunk cursors
			// "<sequence>.<k>", where clients had digits only.
			pack := deps.Config.PackChunks
			ct.chunkBatchesWritable = func() bool { return pack && own.ActiveFormat() >= agentd.FormatChunkBatches }
			// A node of the previous release reads a turn.completed
			// without its message and usage.
			ct.endRecordsWritable = func() bool { return own.ActiveFormat() >= agentd.FormatEndRecords }
			// A node of the previous release reads no op.started in a
			// stash: its verify would report the op never started.
			ct.announcedStepsWritable = func() bool { return own.ActiveFormat() >= agentd.FormatAnnouncedSteps }
			// A node of the previous release reads a turn.completed
			// that carries its fiber's end as the turn's alone: its runs
			// view would keep the fiber, and recover it.
			ct.inlineEndsWritable = func() bool { return own.ActiveFormat() >= agentd.FormatInlineEnds }
		}
		maxTurns := d.Config().MaxTurns
		q := deps.Quotas.Quota().Turns
		switch {
		case ct.node != nil:
			// The node's bound holds across its tenants; the tenant's
			// quota is its own, refused with 429.
			var refusal error
			if q > 0 {
				refusal = &quota.Error{Quota: "turns", Limit: float64(q)}
			}
			ct.turns = ct.node.Sub(q, refusal)
		case q > 0 && (maxTurns < 0 || q < maxTurns):
			// The tenant's quota binds before the node's limit: past it,
			// 429 rather than 503.
			ct.turns, ct.turnQuota = chat.NewTurnLimiter(q), q
		default:
			ct.turns = chat.NewTurnLimiter(maxTurns)
		}
		if deps.Registerer != nil {
			running := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "forever_chat_turns_running",
				Help: "Chat turns running on this node (--max-turns bounds new ones).",
			}, func() float64 { return float64(ct.turns.Running()) })
			if err := deps.Registerer.Register(running); err != nil {
				return err
			}
		}
		if err := ct.openBlobs(ctx, d, deps); err != nil {
			return err
		}
		if ct.live, err = chunk.NewLive(deps.Conn, deps.Log.Prefix(), deps.Registerer); err != nil {
			return err
		}
		ct.batcher = deps.Log.NewBatcher(eventlog.BatcherConfig{})
		return d.Add("chunk batcher", ct.batcher)
	})
}

// Store returns the chat read side (nil before the daemon started).
func (ct *Type) Store() *chat.Store { return ct.store }

// StatusDetail is the status detail of a chat agent read from the views
// (chat.Store.Status: its turns and children in flight), for an agent not
// active on this node: host.SetStatusDetail("chat", chats.StatusDetail).
// The host caught the views up with the agent's last event before.
func (ct *Type) StatusDetail(_ context.Context, agent string) (any, error) {
	if ct.store == nil {
		return nil, host.ErrUnavailable.Wrapf("the chat views are not open yet")
	}
	return ct.store.Status(agent)
}

// Factory is the Factory of the chat agent type.
func (ct *Type) Factory(_ context.Context, env *host.Env) (host.Agent, error) {
	cfg := chat.Config{
		Agent: env.ID, Log: env.Log, Store: ct.store, Batcher: ct.batcher, Live: ct.live, MaxPayload: ct.maxPayload,
		Fibers: env.Fibers, Provider: ct.provider, Logger: env.Logger, Registerer: ct.registerer,
		Turns: ct.turns, TracerProvider: ct.tp, TraceContent: ct.content, AgentName: env.Type,
		Price:         ct.price,
		BlobThreshold: ct.blobTh,
		ContextTokens: ct.contextTokens,

		BatchesWritable:        ct.batchesWritable,
		ChunkBatchesWritable:   ct.chunkBatchesWritable,
		EndRecordsWritable:     ct.endRecordsWritable,
		AnnouncedStepsWritable: ct.announcedStepsWritable,
		InlineEndsWritable:     ct.inlineEndsWritable,
	}
	if ct.shared != nil {
		cfg.SharedBudgets = ct.shared
	}
	if ct.blobs != nil {
		cfg.Blobs, cfg.BlobRefsWritable, cfg.ChunkRefsWritable = ct.blobs, ct.refsWritable, ct.chunkRefsWritable
	}
	if ct.limit != nil {
		cfg.Limiter = ct.limit
	}
	if env.Command != nil {
		cfg.Peers = peers{command: env.Command, ownedViews: ct.log != nil && ct.log.OwnedViews()}
	}
	if ct.config != nil {
		ct.config(&cfg)
	}
	cfg.OnState = publishState(env, cfg.OnState)
	cfg.OnLink = broadcastLinks(env, cfg.OnLink)
	cfg.OnBudget = budgetNotice(env, cfg.OnBudget)
	a, err := chat.New(cfg)
	if err != nil {
		return nil, err
	}
	return &Agent{Agent: a, store: ct.store, log: ct.log, logger: env.Logger, turnQuota: ct.turnQuota, maxReply: host.ReplyLimit(ct.maxPayload)}, nil
}

// Agent adapts a chat.Agent to the host: commands and fiber recovery.
type Agent struct {
	*chat.Agent
	store     *chat.Store   // the read side, for approvals and streams
	log       *eventlog.Log // the node's, whose views store reads
	logger    *slog.Logger
	turnQuota int // the tenant's turns quota when it binds
	// maxReply is the largest reply a command sends (host.ReplyLimit): a
	// page of messages stops before it.
	maxReply int
}

// pageOverhead is what the messages reply adds around its messages:
// {"messages":[...],"next":"<id>"}.
const pageOverhead = 256

// page returns the messages of p, as Messages does, but no more than fit
// in budget bytes of JSON (pageMessages).
func (c *Agent) page(p chat.Page, budget int) ([]chat.Message, string, error) {
	p.Inline = inlineLimit(budget)
	return pageMessages(c.Messages, p, budget)
}

// pageMessages reads p's messages through read, but no more than fit in
// budget bytes of JSON: a page that would be larger ends early and its
// next continues it. A single message larger than budget is ErrTooLarge,
// naming it: it cannot be carried by one reply. The messages verb and GET
// /v1/chat/{id}/messages page alike.
func pageMessages(read func(chat.Page) ([]chat.Message, string, error), p chat.Page, budget int) ([]chat.Message, string, error) {
	const chunk = 64 // messages read from the view at a time
	var out []chat.Message
	size := pageOverhead
	after := p.After
	for {
		lim := chunk
		if p.Limit > 0 {
			lim = min(chunk, p.Limit-len(out))
		}
		msgs, next, err := read(chat.Page{After: after, Limit: lim, Inline: p.Inline})
		if err != nil {
			return out, "", err
		}
		for _, m := range msgs {
			b, err := json.Marshal(m)
			if err != nil {
				return out, "", err
			}
			if size+len(b)+1 > budget {
				if len(out) == 0 {
					return nil, "", host.ErrTooLarge.Wrapf("message %s is %d bytes, more than one reply carries (%d bytes)", m.ID, len(b), budget)
				}
				return out, out[len(out)-1].ID, nil
			}
			size += len(b) + 1
			out = append(out, m)
		}
		if next == "" || (p.Limit > 0 && len(out) >= p.Limit) {
			return out, next, nil
		}
		after = next
	}
}

// Request is the payload of the chat command: a text, or a message, or
// an AI SDK useChat body ({id, messages}) whose last user message is sent.
type Request struct {
	Text string `json:"text,omitempty"`
	// RequestID is the command's identity (chat.SendRequest.RequestID):
	// a chat sent again with it, or with the same message id, runs once
	// and gets the first one's reply. Without either, the id the command
	// got where it entered the cluster (host.Command.RequestID) is used.
	RequestID string         `json:"requestId,omitempty"`
	Message   *chat.Message  `json:"message,omitempty"`
	Messages  []chat.Message `json:"messages,omitempty"`
	Tools     []llm.Tool     `json:"tools,omitempty"`
	// Multitask is what to do when a turn of the agent runs: "reject"
	// (409), "interrupt", "enqueue", "steer", "rollback", "merge" or
	// "debounce" (chat.Multitask); "" is the agent type's default. The
	// HTTP gateway also takes it from the Forever-Multitask header.
	Multitask string `json:"multitask,omitempty"`
	// DebounceMs is the quiet window of a "debounce" message's batch in
	// milliseconds (chat.SendRequest.Debounce); 0 is the agent type's.
	DebounceMs int64 `json:"debounceMs,omitempty"`
	// Parent is set by a sub-agent call of another agent's turn
	// (chat.ParentRef): the call, and the chain of its callers.
	Parent *chat.ParentRef `json:"parent,omitempty"`
	// Trigger and MessageID are the AI SDK's: "submit-message" or
	// "regenerate-message", and the id of the message edited or
	// regenerated. History sums up the messages before the last one,
	// which the HTTP gateway does not pass on (ParseRequest sums up those
	// of a body that has them). See reconcile.
	Trigger   string          `json:"trigger,omitempty"`
	MessageID string          `json:"messageId,omitempty"`
	History   *replay.History `json:"history,omitempty"`
	// Body is the request context the turn keeps: the payload without
	// its messages (requestContext), so a turn's events do not grow with
	// the conversation a client sends along.
	Body json.RawMessage `json:"-"`
	// Answering is set when an AI SDK body's last message is the waiting
	// assistant message with tool calls answered (an approval response,
	// a client tool's result): the turn resumes it.
	Answering *chat.Message `json:"-"`
}

// Reply is the reply to the chat command: the turn's request id, its
// stream, the assistant message it writes, and the cursor to follow the
// stream after, a string of digits (JSON numbers lose precision in
// JavaScript past 2^53): the agent's last chunk before the turn's first,
// or "0" (see chat.Turn.Cursor).
type Reply struct {
	RequestID string        `json:"requestId"`
	StreamID  string        `json:"streamId"`
	MessageID string        `json:"messageId"`
	Cursor    replay.Cursor `json:"cursor"`
}

// OnError ends a chat turn whose fiber was abandoned, so its stream is not
// left streaming with no owner; other errors are logged.
func (c *Agent) OnError(ctx context.Context, err error) {
	var ab *fiber.AbandonedError
	if errors.As(err, &ab) {
		if aerr := c.AbandonTurn(context.WithoutCancel(ctx), ab.Name, err); aerr != nil {
			c.logger.Error("end abandoned turn", "fiber", ab.ID, "err", aerr)
		}
		return
	}
	c.logger.Error("chat agent error", "err", err)
}

// OnStoreLost ends the turn the agent was streaming when the log lost its
// events (the host stopped the agent first): its stream gets an error chunk
// naming the loss, so clients following it see an error rather than wait.
// What it cannot record (turn.failed, the partial answer: their history
// is gone) is logged.
func (c *Agent) OnStoreLost(ctx context.Context, cause error) {
	st, err := c.Status()
	if err != nil || st.ActiveTurn == nil {
		return
	}
	if err := c.AbandonTurn(ctx, chat.TurnFiberPrefix+st.ActiveTurn.RequestID, cause); err != nil {
		c.logger.Warn("end the turn of a lost history", "request", st.ActiveTurn.RequestID, "err", err)
	}
}

var _ host.StoreLostHandler = (*Agent)(nil)

// OnFiberRecovered hands chat turn fibers to the chat agent.
func (c *Agent) OnFiberRecovered(ctx context.Context, rec fiber.Recovered) error {
	handled, err := c.Agent.OnFiberRecovered(ctx, rec)
	if !handled && err == nil {
		return fmt.Errorf("agentd: chat agent has no recovery for fiber %s (%s)", rec.ID, rec.Name)
	}
	return err
}

// ToolsReply is the reply of the tools verb: the agent's server tools (the
// demo tools, the --mcp servers' and the program's own), sorted by name.
type ToolsReply struct {
	Tools []chat.ToolInfo `json:"tools"`
}

// HandleCommand answers chat, messages, status, cancel, interrupt, state
// and tools.
func (c *Agent) HandleCommand(ctx context.Context, cmd host.Command) (any, error) {
	reply, err := c.handle(ctx, cmd)
	if c.turnQuota > 0 && errors.Is(err, chat.ErrOverloaded) {
		return reply, &quota.Error{Quota: "turns", Limit: float64(c.turnQuota)}
	}
	return reply, chatError(err)
}

func (c *Agent) handle(ctx context.Context, cmd host.Command) (any, error) {
	switch cmd.Verb {
	case "chat":
		req, err := ParseRequest(cmd.Data)
		if err != nil {
			return nil, err
		}
		if id, ok := auth.IdentityFrom(ctx); ok && !id.Role.AtLeast(auth.RoleWriter) {
			if err := approvalsOnly(&req, id); err != nil {
				return nil, err
			}
		}
		var turn chat.Turn
		if req.Answering != nil {
			turn, err = c.AnswerMessage(ctx, *req.Answering, req.Body)
		} else {
			id := req.RequestID
			if id == "" && (req.Message == nil || req.Message.ID == "") {
				id = cmd.RequestID
			}
			var msgID string
			if req.Message != nil {
				msgID = req.Message.ID
			}
			if err := c.BudgetRefusal(ctx, id, msgID); err != nil {
				return nil, err // 402 until the budget's period resets
			}
			turn, err = c.send(ctx, req, chat.SendRequest{Text: req.Text, Message: req.Message, Body: req.Body, Tools: req.Tools, RequestID: id, Parent: req.Parent, Multitask: chat.Multitask(req.Multitask), Debounce: time.Duration(req.DebounceMs) * time.Millisecond})
		}
		if err != nil {
			return nil, err
		}
		return chatReply(turn), nil
	case "approve":
		var req approveRequest
		if err := decodeOptional(cmd.Data, &req); err != nil {
			return nil, err
		}
		if req.Approved == nil || (req.ToolCallID == "" && req.ApprovalID == "") {
			return nil, host.ErrBadRequest.Wrapf("approve: send {\"toolCallId\" or \"approvalId\", \"approved\": true|false, \"reason\"?}")
		}
		turn, err := c.Answer(ctx, []chat.ToolAnswer{{CallID: req.ToolCallID, ApprovalID: req.ApprovalID, Approved: req.Approved, Reason: req.Reason}}, nil)
		if err != nil {
			return nil, err
		}
		return chatReply(turn), nil
	case "tool-result":
		var req toolResultRequest
		if err := decodeOptional(cmd.Data, &req); err != nil {
			return nil, err
		}
		if req.ToolCallID == "" || (len(req.Output) == 0 && req.ErrorText == "") {
			return nil, host.ErrBadRequest.Wrapf("tool-result: send {\"toolCallId\", \"output\" (JSON) or \"errorText\"}")
		}
		turn, err := c.Answer(ctx, []chat.ToolAnswer{{CallID: req.ToolCallID, Output: req.Output, ErrorText: req.ErrorText}}, nil)
		if err != nil {
			return nil, err
		}
		return chatReply(turn), nil
	case "messages":
		var p chat.Page
		if err := decodeOptional(cmd.Data, &p); err != nil {
			return nil, err
		}
		if err := c.Settle(ctx); err != nil && !errors.Is(err, chat.ErrTurnActive) {
			return nil, err // past the bound the page is read as it is
		}
		msgs, next, err := c.page(p, c.maxReply)
		if msgs == nil {
			msgs = []chat.Message{}
		}
		return map[string]any{"messages": msgs, "next": next}, err
	case "status":
		return c.Status()
	case "approvals":
		return c.approvals(ctx)
	case "streams":
		var req StreamsRequest
		if err := decodeOptional(cmd.Data, &req); err != nil {
			return nil, err
		}
		return c.streams(ctx, req)
	case "usage":
		return c.usage(ctx)
	case "budget":
		return c.budget(ctx, cmd.Data)
	case "tools":
		return ToolsReply{Tools: c.Tools()}, nil
	case "cancel":
		var req cancelRequest
		if err := decodeOptional(cmd.Data, &req); err != nil {
			return nil, err
		}
		var cancelled bool
		var err error
		if req.RequestID != "" {
			cancelled, err = c.CancelTurn(ctx, req.RequestID)
		} else {
			cancelled, err = c.Cancel(ctx)
		}
		return map[string]bool{"cancelled": cancelled}, err
	case "child-result":
		var n chat.ChildNotice
		if err := decodeOptional(cmd.Data, &n); err != nil {
			return nil, err
		}
		if err := c.ChildEnded(ctx, n); err != nil {
			return nil, err
		}
		return map[string]bool{"ok": true}, nil
	case "child-turn":
		var req childTurnRequest
		if err := decodeOptional(cmd.Data, &req); err != nil {
			return nil, err
		}
		if req.RequestID == "" {
			return nil, host.ErrBadRequest.Wrapf("child-turn: send {\"requestId\"}")
		}
		return c.TurnOutcome(ctx, req.RequestID)
	case "interrupt":
		var req interruptRequest
		if err := decodeOptional(cmd.Data, &req); err != nil {
			return nil, err
		}
		if req.Name == "" {
			req.Name = chat.InterruptTurn
		}
		if req.Clear {
			err := c.ClearInterrupt(ctx, req.Name)
			return map[string]any{"name": req.Name, "set": false}, err
		}
		err := c.SetInterrupt(ctx, req.Name)
		return map[string]any{"name": req.Name, "set": true}, err
	case "state":
		var req stateRequest
		if err := decodeOptional(cmd.Data, &req); err != nil {
			return nil, err
		}
		if req.Value == nil {
			v, version, err := c.State()
			return map[string]any{"value": v, "version": version}, err
		}
		if req.ExpectVersion == nil {
			return nil, host.ErrBadRequest.Wrapf("state: set expectVersion (0 for the first write)")
		}
		version, err := c.SetState(ctx, req.Value, *req.ExpectVersion)
		return map[string]any{"version": version}, err
	}
	return nil, host.ErrNotFound.Wrapf("chat agents take %s; not %q", strings.Join(append([]string{"status"}, Verbs...), ", "), cmd.Verb)
}

// approvalsOnly lets a credential below writer (an approver: host lets
// no other role send chat) answer approvals and nothing else: req must
// answer an assistant message, and its client tool results are dropped,
// so only its approval responses count (a tool result is a writer's).
func approvalsOnly(req *Request, id auth.Identity) error {
	if req.Answering == nil {
		return host.ErrForbidden.Wrapf("credential %s (role %s) may answer approvals but not start a turn", id.Cred, id.Role)
	}
	m := *req.Answering
	m.Parts = slices.Clone(m.Parts)
	for i, p := range m.Parts {
		if p.State == chat.ToolOutput || p.State == chat.ToolOutputError {
			p.State, p.Output, p.ErrorText = chat.ToolInputAvailable, nil, ""
			m.Parts[i] = p
		}
	}
	req.Answering = &m
	return nil
}

func chatReply(turn chat.Turn) Reply {
	return Reply{RequestID: turn.RequestID, StreamID: turn.StreamID, MessageID: turn.MessageID, Cursor: replay.CursorAt(turn.Cursor)}
}

// approveRequest is the payload of the approve command.
type approveRequest struct {
	ToolCallID string `json:"toolCallId"`
	ApprovalID string `json:"approvalId"`
	Approved   *bool  `json:"approved"`
	Reason     string `json:"reason"`
}

// toolResultRequest is the payload of the tool-result command.
type toolResultRequest struct {
	ToolCallID string          `json:"toolCallId"`
	Output     json.RawMessage `json:"output"`
	ErrorText  string          `json:"errorText"`
}

// cancelRequest is the payload of the cancel command: without a request
// id it cancels the active turn; with one, only that turn, if active (a
// parent cancelling its sub-agent's turn).
type cancelRequest struct {
	RequestID string `json:"requestId,omitempty"`
}

// interruptRequest is the payload of the interrupt command; an empty name
// is chat.InterruptTurn.
type interruptRequest struct {
	Name  string `json:"name"`
	Clear bool   `json:"clear"`
}

// stateRequest is the payload of the state command: no value reads the
// state, a value sets it if the version is still ExpectVersion.
type stateRequest struct {
	Value         json.RawMessage `json:"value"`
	ExpectVersion *int            `json:"expectVersion"`
}

// ParseRequest decodes a chat command payload: {text}, {message}, or an
// AI SDK body {id, messages: [...]} (its last message is the user's).
func ParseRequest(data json.RawMessage) (Request, error) {
	var req Request
	if len(data) == 0 {
		return req, host.ErrBadRequest.Wrapf("empty payload, send {\"text\": \"...\"}")
	}
	if err := apierror.Decode(data, &req); err != nil {
		// A client sees apierror's sentence (host.ClientError finds it).
		return req, fmt.Errorf("%w: %w", host.ErrBadRequest, err)
	}
	if _, err := chat.ParseMultitask(req.Multitask); err != nil {
		return req, fmt.Errorf("%w: %w", host.ErrBadRequest, err)
	}
	if req.DebounceMs < 0 || req.DebounceMs > chat.MaxDebounceWindow.Milliseconds() {
		return req, fmt.Errorf("%w: debounceMs %d is outside 0 to %d", host.ErrBadRequest, req.DebounceMs, chat.MaxDebounceWindow.Milliseconds())
	}
	req.Body = requestContext(data)
	if req.Text == "" && req.Message == nil && len(req.Messages) > 0 {
		last := req.Messages[len(req.Messages)-1]
		if earlier := req.Messages[:len(req.Messages)-1]; req.History == nil && len(earlier) > 0 {
			h := digestOf(earlier)
			req.History = &h
		}
		if last.Role == chat.RoleAssistant {
			req.Answering = &last
			return req, nil
		}
		if last.Role != "user" {
			return req, host.ErrBadRequest.Wrapf("the last message has role %q, want user", last.Role)
		}
		req.Message = &last
	}
	if n := newMessageBytes(req); n > host.MaxCommandBytes {
		return req, apierror.OverLimit(int64(n), host.MaxCommandBytes)
	}
	return req, nil
}

// newMessageBytes is the size of the message a chat request adds: its
// text, or its new user message as JSON. The one size limit
// (host.MaxCommandBytes) bounds it on every transport: a NATS command's
// whole payload, and the new message of an HTTP body, whose history the
// AI SDK sends along (bounded by the gateway's body limit).
func newMessageBytes(req Request) int {
	if req.Message == nil {
		return len(req.Text)
	}
	b, err := json.Marshal(req.Message)
	if err != nil {
		return 0 // chat.Send refuses it
	}
	return len(b)
}

func decodeOptional(data json.RawMessage, v any) error {
	if len(data) == 0 || strings.TrimSpace(string(data)) == "null" {
		return nil
	}
	if err := apierror.Decode(data, v); err != nil {
		return fmt.Errorf("%w: %w", host.ErrBadRequest, err)
	}
	return nil
}

// chatError maps chat's errors to the command codes, keeping chat's error
// as the cause: chat's sentinels carry their sentence (apierror.Declare),
// which the client reads with its detail. A stream the chunk store does
// not know is a 404, and a full node's --max-turns a 429.
func chatError(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, chat.ErrEmptyMessage), errors.Is(err, chat.ErrInvalidMessage), errors.Is(err, chat.ErrInvalidBudget):
		return fmt.Errorf("%w: %w", host.ErrBadRequest, err)
	case errors.Is(err, chat.ErrTurnActive), errors.Is(err, chat.ErrDuplicateMessage),
		errors.Is(err, chat.ErrVersionConflict), errors.Is(err, chat.ErrNoAssistantMessage),
		errors.Is(err, chat.ErrAlreadyAnswered):
		return fmt.Errorf("%w: %w", host.ErrConflict, err)
	case errors.Is(err, chat.ErrNotFound), errors.Is(err, chat.ErrUnknownToolCall):
		return fmt.Errorf("%w: %w", host.ErrNotFound, err)
	case errors.Is(err, chunk.ErrUnknownStream):
		return apierror.New(apierror.NotFound, "this agent has no such stream").WithCause(err)
	case errors.Is(err, chat.ErrOverloaded):
		return &overloadedError{err}
	}
	return err
}

// overloadedError is a turn refused by the node's --max-turns, as the
// client gets it: 429 with Retry-After, at once. It is not a 503
// (host.ErrUnavailable), which the router retries for its handoff wait:
// a full node has no more room a moment later, and the client is better
// told now to come back.
type overloadedError struct{ err error }

func (e *overloadedError) Error() string { return e.err.Error() }

func (e *overloadedError) Unwrap() error { return e.err }

// StatusCode is 429.
func (e *overloadedError) StatusCode() int { return http.StatusTooManyRequests }

// APIError is chat.ErrOverloaded's sentence (and its detail), as a 429.
func (e *overloadedError) APIError() *apierror.Error {
	return apierror.New(apierror.OverQuota, "%s", apierror.Declared(e.err).Message).WithRetryAfter(e.RetryAfter()).WithCause(e)
}

// RetryAfter is a second: turns end and free their slots all the time.
func (e *overloadedError) RetryAfter() time.Duration { return time.Second }
