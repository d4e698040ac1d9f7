package chat

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/forever-agents/forever/chat/cost"
	"github.com/forever-agents/forever/eventlog"
)

// Sub-agent modes: how a call of an agent tool picks its child.
const (
	// ModeEphemeral: every call runs a new child, whose agent id is
	// derived from the call (EphemeralChildID); nothing of it is reused.
	ModeEphemeral = "ephemeral"
	// ModePersistent: the child is a named agent that keeps its id and its
	// conversation across calls; each call is one more turn of it.
	ModePersistent = "persistent"
)

// DefaultMaxDepth bounds the length of a chain of sub-agent calls: a root
// agent's children are at depth 1, theirs at 2, and a call that would make
// a child deeper than the limit is refused with a tool error.
const DefaultMaxDepth = 5

// DefaultChildPoll is how often a turn awaiting its children reads their
// state when no notice came (Config.ChildPoll).
const DefaultChildPoll = 10 * time.Second

// Event types of sub-agent links, on the parent's events subject; their
// data is a ChildLink.
const (
	// EventSubagentStarted records that a tool call's child turn started
	// (its request id, stream and assistant message): the link, status
	// "running".
	EventSubagentStarted = "subagent.started"
	// EventSubagentEnded records the link's end: the child turn's outcome
	// (status completed, failed or interrupted, with the tool's output or
	// error and the child's usage), or "cancelled" when the parent's turn
	// ended first (its children were cancelled).
	EventSubagentEnded = "subagent.ended"
)

// Link statuses (ChildRef.Status).
const (
	LinkRunning     = "running"
	LinkCompleted   = "completed"
	LinkFailed      = "failed"
	LinkInterrupted = "interrupted"
	// LinkCancelled: the parent's turn ended (cancelled, interrupted or
	// failed) while the child ran; the child was told to stop.
	LinkCancelled = "cancelled"
)

// ErrChildRefused is what a Peers implementation wraps around an answer
// that means a child's turn will not run (an id no agent type takes, a
// persistent child busy with another turn, a request it refused): the
// call ends with a tool error the model sees. Other errors of StartChild
// are taken as transient and the start is tried again, with the same
// request id.
var ErrChildRefused = errors.New("chat: the child agent refused the call")

// Peers reaches other agents wherever they run, for sub-agent calls.
// agentd's implementation (package agentd/chathost) sends each as a
// command through the host's command path, so it reaches the agent's
// owner on any node. Implementations are safe for concurrent use.
type Peers interface {
	// StartChild sends child a chat command starting its turn (the chat
	// verb): req.RequestID is the call's idempotency key, so a start sent
	// again returns the turn the first one started. It returns once the
	// child's turn is durable.
	StartChild(ctx context.Context, child string, req ChildRequest) (Turn, error)
	// CancelChild cancels child's turn requestID if it is the child's
	// active turn (the cancel verb with a request id).
	CancelChild(ctx context.Context, child, requestID string) error
	// NotifyParent tells parent that a child turn ended (the child-result
	// verb), so its waiting turn reads the outcome now instead of at its
	// next poll. The parent reads the outcome from the log itself: a
	// notice carries no result and may come any number of times.
	NotifyParent(ctx context.Context, parent string, n ChildNotice) error
}

// ChildRequest is the turn a sub-agent call asks of its child.
type ChildRequest struct {
	// RequestID is the child turn's request id: ChildRequestID of the
	// parent's call, the same every time the call is retried.
	RequestID string `json:"requestId"`
	Text      string `json:"text"`
	// Parent names the call, and carries its chain of callers.
	Parent ParentRef `json:"parent"`
}

// ChildNotice is the payload of the child-result command: the child turn
// that ended, and the parent's call it answers.
type ChildNotice struct {
	Child           string `json:"child"`
	RequestID       string `json:"requestId"`
	ParentRequestID string `json:"parentRequestId"`
	CallID          string `json:"callId"`
}

// ParentRef is what a child's turn knows of the call that started it. It
// is stored in the child's turn.started (TurnInfo.Parent).
type ParentRef struct {
	Agent     string `json:"agent"`
	RequestID string `json:"requestId"`
	CallID    string `json:"callId"`
	Mode      string `json:"mode"`
	// Chain is the agents of the calls that led to the child, from the
	// root's to the parent's (the parent last): a call of an agent in it
	// is a cycle, and its length is the child's depth.
	Chain []string `json:"chain"`
}

// ChildRef names a child turn: the value of a data-subagent part of the
// parent's stream and message (its id the call id), so a client can
// follow the child's stream (<prefix>.chunk.<agent>.<streamId>) live or
// replay it; the tool's output repeats it.
type ChildRef struct {
	Agent string `json:"agent"`
	// Type is the child's agent type when the tool names one
	// (NewAgentTool); empty for the agent tool, whose host decides it.
	Type      string `json:"type,omitempty"`
	Mode      string `json:"mode"`
	CallID    string `json:"callId"`
	RequestID string `json:"requestId"`
	StreamID  string `json:"streamId,omitempty"`
	MessageID string `json:"messageId,omitempty"`
	Status    string `json:"status"`
}

// ChildLink is one sub-agent call as the parent records it
// (subagent.started, then subagent.ended) and Store.Links returns it.
type ChildLink struct {
	ChildRef
	// ParentRequestID is the parent's turn.
	ParentRequestID string    `json:"parentRequestId"`
	StartedAt       time.Time `json:"startedAt,omitzero"`
	EndedAt         time.Time `json:"endedAt,omitzero"`
	// Output is the tool's output (a ChildOutput) for a completed child;
	// Error the tool error the model is shown otherwise.
	Output json.RawMessage `json:"output,omitempty"`
	Error  string          `json:"error,omitempty"`
	// Usage is the child turn's usage, its own children's included.
	Usage *SubagentUsage `json:"usage,omitempty"`
}

// Ended reports whether the link has ended.
func (l ChildLink) Ended() bool { return l.Status != "" && l.Status != LinkRunning }

// ChildOutput is the output of a sub-agent call whose child completed:
// the child's reference and its final text.
type ChildOutput struct {
	ChildRef
	Text string `json:"text"`
	// Truncated is set when Text was cut to fit the tool's output limit.
	Truncated bool `json:"truncated,omitempty"`
}

// SubagentUsage is token usage of sub-agents: in a usage record and the
// roll-up, the part that came from children, marked as such.
type SubagentUsage struct {
	Input  int64 `json:"input"`
	Output int64 `json:"output"`
	// Calls counts the child turns.
	Calls int `json:"calls"`
	// Cost is what the child turns cost, each at its agent's price.
	Cost cost.Micros `json:"cost,omitempty"`
}

func (u *SubagentUsage) add(v SubagentUsage) {
	u.Input += v.Input
	u.Output += v.Output
	u.Calls += v.Calls
	u.Cost += v.Cost
}

// ChildRequestID is the request id of the child turn that the tool call
// callID of parent's turn requestID runs: "sub-" and 32 hex characters of
// a SHA-256 of the three. It is the call's idempotency key: every start of
// the call, after any crash, asks the child for the same turn.
func ChildRequestID(parent, requestID, callID string) string {
	h := sha256.Sum256([]byte(strings.Join([]string{"subagent", parent, requestID, callID}, "\x00")))
	return "sub-" + hex.EncodeToString(h[:16])
}

// EphemeralChildID is the agent id of the ephemeral child that the tool
// call callID of parent's turn requestID runs, from base (the agent tool's
// "agent" input, or "<child type>:<tool name>" for NewAgentTool):
//
//	<base>~<parent>~<12 hex characters of a SHA-256 of parent, requestID and callID>
//
// with every ':' of parent written '_', so the child's type is base's.
// A valid agent id (a subject token of at most 256 bytes) as long as base
// and parent are; the hash makes it new for every call.
func EphemeralChildID(base, parent, requestID, callID string) string {
	h := sha256.Sum256([]byte(strings.Join([]string{"ephemeral", parent, requestID, callID}, "\x00")))
	return base + "~" + strings.ReplaceAll(parent, ":", "_") + "~" + hex.EncodeToString(h[:6])
}

// agentTool is what makes a Tool an agent tool: how a call names its child.
type agentTool struct {
	// childType is NewAgentTool's child type; "" for the agent tool,
	// whose input names the child.
	childType string
	mode      string // the default mode
}

// AgentOption sets an option of an agent tool (NewAgentTool, AgentTool).
type AgentOption func(*agentTool)

// WithMode sets the tool's mode when a call does not name one:
// ModeEphemeral or ModePersistent.
func WithMode(mode string) AgentOption { return func(t *agentTool) { t.mode = mode } }

// AgentToolName is the name of the agent tool (AgentTool).
const AgentToolName = "agent"

// agentToolInput is the agent tool's input.
type agentToolInput struct {
	Agent string `json:"agent" jsonschema:"the child agent's id (persistent), or the base of a new child's id (ephemeral)"`
	Text  string `json:"text" jsonschema:"the message the child answers"`
	Mode  string `json:"mode,omitempty" jsonschema:"persistent (the default): the agent keeps its conversation across calls; ephemeral: a new agent for this call only"`
}

// typedToolInput is a NewAgentTool's input.
type typedToolInput struct {
	Text string `json:"text" jsonschema:"the message the child answers"`
	Name string `json:"name,omitempty" jsonschema:"persistent children only: which one to ask (default: the tool's own)"`
}

// AgentTool returns the built-in tool "agent": a call runs one turn of
// another agent (a sub-agent) and its output is the child's final text.
// Its input is
//
//	{"agent": "<child id>", "text": "<message>", "mode": "persistent" | "ephemeral"}
//
// In persistent mode (the default, WithMode changes it) the child is the
// agent named; in ephemeral mode a new child per call, whose id
// EphemeralChildID derives from "agent" and the call. The local model
// calls it with "/agent <child id> <text>" too. See NewAgentTool for how a
// call runs.
func AgentTool(opts ...AgentOption) (*Tool, error) {
	spec := &agentTool{mode: ModePersistent}
	for _, o := range opts {
		o(spec)
	}
	return newAgentTool[agentToolInput](AgentToolName,
		"Asks another agent (a sub-agent) and returns its answer. Persistent agents keep their conversation across calls; an ephemeral agent is new for this call.",
		spec)
}

// NewAgentTool makes a tool whose calls run a turn of a child agent of
// type childType (a sub-agent); its output is the child's final text (a
// ChildOutput). Its input is {"text": "<message>", "name"?: "<name>"}.
// Ephemeral (the default; WithMode changes it): each call runs a new
// child, EphemeralChildID("<childType>:<name>", ...). Persistent: the
// child "<childType>:<name of the input, or the tool's>" keeps its
// conversation across calls.
//
// A call runs as the parent turn's step: the child's turn is started
// through Config.Peers on whatever node owns the child, with the call's
// idempotency key as its request id (ChildRequestID), and recorded on the
// parent (subagent.started); the parent's stream names the child in a
// data-subagent part; then the parent's turn waits, idle (its agent may be
// deactivated meanwhile), until the child's turn ends, and records it
// (subagent.ended) and writes the output. Several calls of one step run at
// once. A call of an agent already in the chain of callers, or deeper than
// Config.MaxDepth, is refused with a tool error. Errors wrap
// ErrInvalidTool.
func NewAgentTool(name, description, childType string, opts ...AgentOption) (*Tool, error) {
	if !eventlog.ValidToken(childType) || strings.Contains(childType, ":") {
		return nil, fmt.Errorf("%w: tool %q: child type %q is not a subject token without ':'", ErrInvalidTool, name, childType)
	}
	spec := &agentTool{childType: childType, mode: ModeEphemeral}
	for _, o := range opts {
		o(spec)
	}
	return newAgentTool[typedToolInput](name, description, spec)
}

func newAgentTool[In any](name, description string, spec *agentTool) (*Tool, error) {
	if spec.mode != ModeEphemeral && spec.mode != ModePersistent {
		return nil, fmt.Errorf("%w: tool %q: mode %q, want %q or %q", ErrInvalidTool, name, spec.mode, ModeEphemeral, ModePersistent)
	}
	t, err := NewTool(name, description, func(context.Context, In) (struct{}, error) {
		// Never called: the turn runs agent tools itself (subagent_run.go).
		return struct{}{}, &ToolError{Type: "error", Message: "a sub-agent call runs only in a chat turn"}
	})
	if err != nil {
		return nil, err
	}
	t.sub = spec
	return t, nil
}

// childCall is what a call of an agent tool asks: the child and its text.
type childCall struct {
	child, mode, text, typ string
}

// resolve reads a call's input (validated against the tool's schema) and
// names its child. A bad input is a *ToolError the model sees.
func (t *agentTool) resolve(input json.RawMessage) (childCall, *ToolError) {
	var c childCall
	if t.childType == "" {
		var in agentToolInput
		if err := json.Unmarshal(input, &in); err != nil {
			return c, &ToolError{Type: "invalid_input", Message: "decode input: " + err.Error()}
		}
		c = childCall{child: in.Agent, mode: cmp.Or(in.Mode, t.mode), text: in.Text}
	} else {
		var in typedToolInput
		if err := json.Unmarshal(input, &in); err != nil {
			return c, &ToolError{Type: "invalid_input", Message: "decode input: " + err.Error()}
		}
		c = childCall{mode: t.mode, text: in.Text, typ: t.childType, child: t.childType + ":" + in.Name}
		if in.Name != "" && strings.Contains(in.Name, ":") {
			return c, &ToolError{Type: "invalid_input", Message: fmt.Sprintf("name %q: a child's name has no ':'", in.Name)}
		}
	}
	switch {
	case c.mode != ModeEphemeral && c.mode != ModePersistent:
		return c, &ToolError{Type: "invalid_input", Message: fmt.Sprintf("mode %q: want %q or %q", c.mode, ModePersistent, ModeEphemeral)}
	case strings.TrimSpace(c.text) == "":
		return c, &ToolError{Type: "invalid_input", Message: "text is empty: say what the child agent should answer"}
	}
	return c, nil
}

// childID completes c.child for the call: an ephemeral child's id is
// derived from the call, a persistent NewAgentTool child's defaults to the
// tool's name.
func (c *childCall) childID(tool, parent, requestID, callID string) *ToolError {
	if c.typ != "" && strings.HasSuffix(c.child, ":") {
		c.child += tool
	}
	if c.mode == ModeEphemeral {
		c.child = EphemeralChildID(c.child, parent, requestID, callID)
	}
	if !eventlog.ValidToken(c.child) {
		return &ToolError{Type: "invalid_input", Message: fmt.Sprintf("agent %q is not a valid agent id (1 to 256 bytes, no '.', '*', '>' or spaces)", c.child)}
	}
	return nil
}

// checkChain refuses a call of child from an agent whose callers are
// chain (the root's first, the caller last): child already in it is a
// cycle; a child deeper than max is too deep.
func checkChain(chain []string, child string, max int) *ToolError {
	if slices.Contains(chain, child) {
		return &ToolError{Type: "cycle", Message: fmt.Sprintf("agent %s is already in the chain of calls (%s): a sub-agent cannot call an agent that is waiting for it",
			child, strings.Join(append(slices.Clone(chain), child), " -> "))}
	}
	if depth := len(chain); depth > max {
		return &ToolError{Type: "depth", Message: fmt.Sprintf("calling %s would make it a sub-agent %d levels deep (%s), more than the limit of %d",
			child, depth, strings.Join(append(slices.Clone(chain), child), " -> "), max)}
	}
	return nil
}
