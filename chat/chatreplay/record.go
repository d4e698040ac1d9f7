package chatreplay

import (
	"encoding/json"
	"strings"

	"github.com/forever-agents/forever/chat"
	"github.com/forever-agents/forever/chat/chunk"
	"github.com/forever-agents/forever/chat/llm"
	"github.com/forever-agents/forever/eventlog"
)

// started is what a replay reads of a recorded turn.started.
type started struct {
	RequestID string            `json:"requestId"`
	StreamID  string            `json:"streamId"`
	MessageID string            `json:"messageId"`
	Body      json.RawMessage   `json:"body,omitempty"`
	Tools     []llm.Tool        `json:"tools,omitempty"`
	Continues string            `json:"continues,omitempty"`
	Answers   []chat.ToolAnswer `json:"answers,omitempty"`
	Message   *chat.Message     `json:"message,omitempty"`
	// Merged are the messages a merge or debounce batch's turn answers
	// after Message.
	Merged []chat.Message `json:"merged,omitempty"`
}

// turn is one recorded turn: its start, the user message it answers, its
// comparable events, and what the model and the tools answered.
type turn struct {
	start   started
	message *chat.Message
	// skip says why the turn cannot be replayed; "" when it can.
	skip   string
	events []eventlog.Event
	chunks []chunk.Chunk
	steps  []recordedStep
	calls  map[string]*recordedCall
}

// recordedStep is one model call of a recorded turn: what the model
// streamed, and the error that ended it ("" when it finished).
type recordedStep struct {
	deltas []llm.Delta
	err    string
}

// recordedCall is a server tool call of a recorded turn and its result.
type recordedCall struct {
	name   string
	input  json.RawMessage
	output json.RawMessage
	errMsg string
	ran    bool
}

// turnEnds are the event types that end a turn.
var turnEnds = map[string]bool{"turn.completed": true, "turn.failed": true, "turn.interrupted": true}

// comparable reports whether e is compared: the turn's own facts, not the
// bookkeeping of its fibers and steps (fiber.*, op.*), whose stashes
// depend on timing.
func comparable(e eventlog.Event) bool {
	return !strings.HasPrefix(e.Type, "fiber.") && !strings.HasPrefix(e.Type, "op.")
}

// requestOf is the requestId of an event's data, "" without one.
func requestOf(e eventlog.Event) string {
	var v struct {
		RequestID string `json:"requestId"`
	}
	_ = json.Unmarshal(e.Data, &v)
	return v.RequestID
}

// turns splits rec into its turns, in the order they started.
func turns(rec *Recording) []*turn {
	chunks := map[string][]chunk.Chunk{}
	var order []string // stream ids, in the order they began
	asm := map[string]*chunk.Assembler{}
	for _, e := range rec.Chunks {
		if e.Type != chunk.EventChunk && e.Type != chunk.EventChunks {
			continue
		}
		a := asm[e.Stream]
		if a == nil {
			a = new(chunk.Assembler)
			asm[e.Stream] = a
		}
		cs, err := a.Chunks(e.Type, e.Data) // one, or a packed record's
		if err != nil {
			continue
		}
		if chunks[e.Stream] == nil {
			order = append(order, e.Stream)
		}
		chunks[e.Stream] = append(chunks[e.Stream], cs...)
	}
	// A call's input and its result may be in two streams: a call waiting
	// for approval runs in the stream of the turn that answers it. Call
	// ids are the model's, unique within the agent's turns.
	calls := map[string]*recordedCall{}
	for _, id := range order {
		recordCalls(chunks[id], calls)
	}
	userMessages := map[string]*chat.Message{}
	var out []*turn
	for i, e := range rec.Events {
		switch e.Type {
		case "message.appended":
			var m chat.Message
			if json.Unmarshal(e.Data, &m) == nil && m.Role == "user" {
				userMessages[m.ID] = &m
			}
			continue
		case "turn.started":
		default:
			continue
		}
		t := &turn{}
		if err := json.Unmarshal(e.Data, &t.start); err != nil {
			continue
		}
		t.message = t.start.Message
		if t.message == nil {
			t.message = userMessages[t.start.MessageID]
		}
		switch {
		case len(t.start.Answers) > 0:
			// Answers (approvals, client results) resume a waiting
			// message: no user message.
		case t.start.Continues != "":
			t.skip = "it continues an earlier answer"
		case len(t.start.Merged) > 0:
			t.skip = "it answers merged messages (merge, debounce)"
		case t.message == nil:
			t.skip = "its user message is not in the log"
		}
		ended := "" // the type of the event that ended the turn
		for _, f := range rec.Events[i:] {
			if comparable(f) {
				// As stored before record format 8, whichever it was
				// stored at: the replay's may differ.
				t.events = append(t.events, chat.SplitEnd(f)...)
			}
			if turnEnds[f.Type] && requestOf(f) == t.start.RequestID {
				ended = f.Type
				break
			}
		}
		switch {
		case t.skip != "":
		case ended == "":
			t.skip = "it has not ended"
		case ended == "turn.interrupted":
			t.skip = "it was interrupted (cancelled, stopped or superseded) from outside the turn"
		}
		t.chunks = chunks[t.start.StreamID]
		t.steps = modelOutputs(t.chunks)
		t.calls = calls
		out = append(out, t)
	}
	return out
}

// recordCalls adds the tool calls of a stream, and their results, to calls.
func recordCalls(cs []chunk.Chunk, calls map[string]*recordedCall) {
	for _, c := range cs {
		switch c.Type {
		case chunk.ToolInput:
			calls[c.ToolCallID] = &recordedCall{name: c.ToolName, input: c.Input}
		case chunk.ToolOutput:
			if rc := calls[c.ToolCallID]; rc != nil {
				rc.output, rc.ran = c.Output, true
			}
		case chunk.ToolOutputError:
			if rc := calls[c.ToolCallID]; rc != nil {
				rc.errMsg, rc.ran = c.ErrorText, true
			}
		}
	}
}

// modelOutputs reads a turn's stream back into what the model streamed in
// each step: the deltas a provider gave, and the error that failed the
// turn.
func modelOutputs(cs []chunk.Chunk) []recordedStep {
	var steps []recordedStep
	var cur []llm.Delta
	open, hasCalls := false, false
	reason := llm.FinishStop
	var usage *llm.Usage
	names := map[string]string{} // tool call id -> name, from tool-input-start
	end := func() {
		if !open {
			return
		}
		steps = append(steps, recordedStep{deltas: cur})
		cur, open, hasCalls = nil, false, false
	}
	for _, c := range cs {
		if !open && c.Type != chunk.StartStep && c.Type != chunk.Finish && c.Type != chunk.Error {
			// Outside a step: the start, and the end of a step of an
			// earlier stream continued here (a turn answering tool
			// calls), which is not a model call.
			continue
		}
		switch c.Type {
		case chunk.StartStep:
			end()
			open = true
		case chunk.TextDelta:
			cur = append(cur, llm.Delta{Kind: llm.TextDelta, Text: c.Delta})
		case chunk.ReasoningDelta:
			cur = append(cur, llm.Delta{Kind: llm.ReasoningDelta, Text: c.Delta})
		case chunk.ToolInputStart:
			names[c.ToolCallID] = c.ToolName
		case chunk.ToolInputDelta:
			cur = append(cur, llm.Delta{Kind: llm.ToolInputDelta, ToolCallID: c.ToolCallID, ToolName: names[c.ToolCallID], Text: c.InputTextDelta})
		case chunk.ToolInput:
			cur = append(cur, llm.Delta{Kind: llm.ToolCallDone, ToolCallID: c.ToolCallID, ToolName: c.ToolName, Input: c.Input})
			hasCalls = true
		case chunk.FinishStep:
			r := reason
			if hasCalls {
				r = llm.FinishToolCalls
			}
			cur = append(cur, llm.Delta{Kind: llm.Finish, FinishReason: r})
			end()
		case chunk.Error:
			if !open {
				steps = append(steps, recordedStep{})
			} else {
				end()
			}
			steps[len(steps)-1].err = c.ErrorText
		case chunk.Finish:
			end()
			if c.FinishReason != "" && c.FinishReason != llm.FinishToolCalls {
				reason = c.FinishReason
			}
			var md chunk.FinishMetadata
			if json.Unmarshal(c.MessageMetadata, &md) == nil && md.Usage != nil {
				usage = &llm.Usage{InputTokens: md.Usage.InputTokens, OutputTokens: md.Usage.OutputTokens}
			}
		}
	}
	end()
	// The stream holds the turn's usage, not each step's: the last step
	// reports it all, and a step without calls finishes as the turn did.
	for i, st := range steps {
		last := i == len(steps)-1
		for j := range st.deltas {
			d := &st.deltas[j]
			if d.Kind != llm.Finish {
				continue
			}
			if d.FinishReason != llm.FinishToolCalls {
				d.FinishReason = reason
			}
			if last && usage != nil {
				u := *usage
				d.Usage = &u
			}
		}
	}
	return steps
}
