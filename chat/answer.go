package chat

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nuid"

	"github.com/forever-agents/forever/blob"
	"github.com/forever-agents/forever/internal/apierror"
)

// Tool errors the model is shown for calls that did not run.
const (
	// ErrTextDenied is the result the model gets for a call the user
	// denied (the reason follows it when one was given).
	ErrTextDenied = "the user denied this tool call"
	// ErrTextUnanswered is the result the model gets for a call nobody
	// answered before the conversation went on.
	ErrTextUnanswered = "this tool call was not answered; it did not run"
)

var (
	// ErrUnknownToolCall (not found) is returned by Answer for a tool call
	// or approval id the last assistant message does not have.
	ErrUnknownToolCall error = apierror.Declare("chat", apierror.NotFound, "no such tool call waits for an answer")
	// ErrWaitExpired (gone) is returned by Answer when the calls waited
	// longer than Config.ToolWaitTimeout: the model is told they were not
	// answered when the conversation goes on.
	ErrWaitExpired error = apierror.Declare("chat", apierror.Gone, "the tool call waited too long for its answer")
	// ErrAlreadyAnswered (conflict) is returned by Answer for a call that
	// was answered (or run) before: an answer never runs a call twice.
	ErrAlreadyAnswered error = apierror.Declare("chat", apierror.Conflict, "the tool call was already answered")
)

// ToolAnswer answers a call the last turn left waiting: an approval
// response for a server tool that needs approval (Approved set), or the
// result of a client tool (Output, or ErrorText).
type ToolAnswer struct {
	// CallID names the call; for an approval, ApprovalID may name it
	// instead.
	CallID     string `json:"toolCallId,omitempty"`
	ApprovalID string `json:"approvalId,omitempty"`
	// Approved answers an approval request; Reason is shown to the model
	// when the call is denied.
	Approved *bool  `json:"approved,omitempty"`
	Reason   string `json:"reason,omitempty"`
	// Output (JSON) or ErrorText is a client tool's result.
	Output    json.RawMessage `json:"output,omitempty"`
	ErrorText string          `json:"errorText,omitempty"`
	// OutputRef holds an Output over Config.BlobThreshold in the stored
	// turn.started (Config.Blobs); readers get Output back.
	OutputRef *blob.Ref `json:"outputRef,omitempty"`
}

// approval reports whether a answers an approval request.
func (a ToolAnswer) approval() bool { return a.Approved != nil }

// Answer resumes the turn that ended waiting for tool answers (approvals,
// client tool results) with answers: a new turn, in a new stream whose
// start chunk names the waiting assistant message, that ends the answered
// calls (runs an approved call once, tells the model of a denied one,
// records a client's result) and goes on with the model. The answers are
// durable in its turn.started before anything runs, so a crash resumes the
// same decision. body replaces the stored request body when not nil.
//
// Errors: ErrUnknownToolCall for a call the last assistant message does not
// wait on, ErrAlreadyAnswered for one answered before (also a second answer
// racing the first), ErrWaitExpired past Config.ToolWaitTimeout,
// ErrInvalidMessage for an answer that says nothing, ErrTurnActive,
// ErrTooLarge, or a log error.
func (c *commands) Answer(ctx context.Context, answers []ToolAnswer, body json.RawMessage) (Turn, error) {
	a := c.a
	if len(answers) == 0 {
		return Turn{}, fmt.Errorf("%w: no answer", ErrInvalidMessage)
	}
	if body != nil && !json.Valid(body) {
		return Turn{}, fmt.Errorf("%w: body is not JSON", ErrInvalidMessage)
	}
	if t, ok, err := a.answerBudget(ctx, answers); ok {
		return t, err // a budget park: its turn waits, running
	}
	if err := a.settle(ctx); err != nil {
		return Turn{}, err
	}
	if err := a.catchUp(ctx); err != nil {
		return Turn{}, err
	}
	history, err := a.store.History(a.agent)
	if err != nil {
		return Turn{}, err
	}
	var last *Message
	for i := len(history) - 1; i >= 0; i-- {
		if history[i].Role == RoleAssistant && !history[i].Hidden {
			last = &history[i]
			break
		}
	}
	if last == nil {
		return Turn{}, fmt.Errorf("%w: the conversation has no assistant message", ErrUnknownToolCall)
	}
	seen := map[string]bool{}
	for i, ans := range answers {
		p, ok := findCall(last.Parts, ans)
		if !ok {
			return Turn{}, fmt.Errorf("%w: %s", ErrUnknownToolCall, ans.name())
		}
		if seen[p.ToolCallID] {
			return Turn{}, fmt.Errorf("%w: %s is answered twice", ErrInvalidMessage, p.ToolCallID)
		}
		seen[p.ToolCallID] = true
		answers[i].CallID = p.ToolCallID
		switch {
		case ans.approval() && p.State == ToolApprovalRequested:
		case ans.approval():
			return Turn{}, fmt.Errorf("%w: %s is %s", ErrAlreadyAnswered, p.ToolCallID, p.State)
		case len(ans.Output) == 0 && ans.ErrorText == "":
			return Turn{}, fmt.Errorf("%w: the answer to %s has no approval, output or error", ErrInvalidMessage, p.ToolCallID)
		case len(ans.Output) > 0 && !json.Valid(ans.Output):
			return Turn{}, fmt.Errorf("%w: the output for %s is not JSON", ErrInvalidMessage, p.ToolCallID)
		case p.State != ToolInputAvailable || a.isServerTool(p.ToolName):
			// A server tool's result is the server's to record.
			return Turn{}, fmt.Errorf("%w: %s (%s) does not wait for a client result", ErrAlreadyAnswered, p.ToolCallID, p.State)
		}
	}
	t := turnStarted{RequestID: nuid.Next(), StreamID: nuid.Next(), AssistantMessageID: last.ID, Continues: last.ID,
		Body: body, Base: last.Parts, Answers: answers}
	var follows string // the asking turn's span: this turn continues its trace
	if last.RequestID != "" {
		if prev, err := a.store.Turn(a.agent, last.RequestID); err == nil {
			follows = prev.TraceParent
			if waited := a.cfg.Clock.Now().Sub(prev.EndedAt); a.cfg.ToolWaitTimeout > 0 && !prev.EndedAt.IsZero() && waited > a.cfg.ToolWaitTimeout {
				return Turn{}, fmt.Errorf("%w: waited %s, at most %s (Config.ToolWaitTimeout)", ErrWaitExpired, waited.Round(time.Second), a.cfg.ToolWaitTimeout)
			}
			if body == nil {
				t.Body = prev.Body
			}
			if t.Tools, err = storedTools(prev); err != nil {
				return Turn{}, err
			}
		}
	}
	return a.start(ctx, t, nil, nil, follows)
}

func (a ToolAnswer) name() string {
	if a.CallID != "" {
		return "tool call " + a.CallID
	}
	return "approval " + a.ApprovalID
}

// findCall finds the tool part ans answers.
func findCall(parts []Part, ans ToolAnswer) (Part, bool) {
	for _, p := range parts {
		if p.Type != PartTool {
			continue
		}
		if (ans.CallID != "" && p.ToolCallID == ans.CallID) ||
			(ans.CallID == "" && ans.ApprovalID != "" && p.Approval != nil && p.Approval.ID == ans.ApprovalID) {
			return p, true
		}
	}
	return Part{}, false
}

// answerFor returns the answer of a turn for call id, if any.
func answerFor(answers []ToolAnswer, callID string) (ToolAnswer, bool) {
	for _, a := range answers {
		if a.CallID == callID {
			return a, true
		}
	}
	return ToolAnswer{}, false
}

// preload starts b from a waiting message's parts (a turn resuming it
// with answers): they are the current step, open, and the answered
// approvals are marked on them, so the tools phase ends the answered calls
// and the message grows from there. It writes no chunk.
func (b *builder) preload(base []Part, answers []ToolAnswer) {
	for _, p := range base {
		if p.Type == PartTool {
			if ans, ok := answerFor(answers, p.ToolCallID); ok && ans.approval() && p.State == ToolApprovalRequested {
				ap := ToolApproval{ID: p.ToolCallID, Approved: ans.Approved, Reason: ans.Reason}
				if p.Approval != nil {
					ap.ID = p.Approval.ID
				}
				p.Approval, p.State = &ap, ToolApprovalResponded
			}
			b.index["tool:"+p.ToolCallID] = b.addPart(p)
			continue
		}
		i := b.addPart(p)
		if p.IsData() && p.ID != "" {
			b.index["data:"+p.Type+"\x00"+p.ID] = i
		}
		if b.text[i] != nil {
			b.text[i].WriteString(p.Text)
		}
	}
	b.steps, b.stepFirst, b.stepOpen = 1, 0, true
}

// approvalID is the id of the approval request of call id.
func approvalID(callID string) string { return "approval-" + callID }

func (c *commands) isServerTool(name string) bool {
	a := c.a
	_, ok := a.cfg.Tools.Lookup(name)
	return ok
}

// turnBuilder is the builder a turn starts from: empty, or, for a turn
// resuming waiting calls, preloaded with the waiting message.
func turnBuilder(info TurnInfo) *builder {
	b := newBuilder()
	if resumesCalls(info) {
		b.preload(info.Base, info.Answers)
	}
	return b
}

// resumesCalls reports whether info is a turn resuming waiting calls.
func resumesCalls(info TurnInfo) bool { return len(info.Answers) > 0 }

// AnswerMessage is Answer with the answers an AI SDK client sends: the
// waiting assistant message as the client holds it, its tool parts
// answered (state approval-responded with approval {id, approved, reason},
// or output-available / output-error for a client tool). Parts of calls
// that do not wait on the server (done before, or still unanswered) are
// ignored; a message that answers none is ErrInvalidMessage.
func (c *commands) AnswerMessage(ctx context.Context, m Message, body json.RawMessage) (Turn, error) {
	a := c.a
	// The client answers as soon as it sees the stream's finish chunk,
	// which is stored before the turn records the message it answers.
	if err := a.settle(ctx); err != nil {
		return Turn{}, err
	}
	if err := a.catchUp(ctx); err != nil {
		return Turn{}, err
	}
	stored, err := a.store.Message(a.agent, m.ID)
	if err != nil {
		return Turn{}, fmt.Errorf("%w: message %s: %w", ErrUnknownToolCall, m.ID, err)
	}
	waiting := map[string]string{} // call id -> state, of the calls that wait
	for _, p := range stored.Parts {
		if p.Type == PartTool && (p.State == ToolApprovalRequested || (p.State == ToolInputAvailable && !a.isServerTool(p.ToolName))) {
			waiting[p.ToolCallID] = p.State
		}
	}
	var answers []ToolAnswer
	for _, p := range m.Parts {
		if p.Type != PartTool && !strings.HasPrefix(p.Type, "tool-") {
			continue
		}
		switch state := waiting[p.ToolCallID]; {
		case state == ToolApprovalRequested && p.State == ToolApprovalResponded && p.Approval != nil && p.Approval.Approved != nil:
			answers = append(answers, ToolAnswer{CallID: p.ToolCallID, Approved: p.Approval.Approved, Reason: p.Approval.Reason})
		case state == ToolInputAvailable && p.State == ToolOutput:
			answers = append(answers, ToolAnswer{CallID: p.ToolCallID, Output: p.Output})
		case state == ToolInputAvailable && p.State == ToolOutputError:
			answers = append(answers, ToolAnswer{CallID: p.ToolCallID, ErrorText: cmp.Or(p.ErrorText, "the client tool failed")})
		}
	}
	if len(answers) == 0 {
		if len(waiting) == 0 {
			return Turn{}, fmt.Errorf("%w: message %s has no tool call waiting for an answer", ErrAlreadyAnswered, m.ID)
		}
		return Turn{}, fmt.Errorf("%w: the assistant message answers none of its waiting tool calls", ErrInvalidMessage)
	}
	return a.Answer(ctx, answers, body)
}
