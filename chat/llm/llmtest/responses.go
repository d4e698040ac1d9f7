package llmtest

import (
	"fmt"
	"strings"
)

// Responses builds an OpenAI Responses API event stream with consecutive
// sequence numbers, and the matching stored response object. Methods append
// events and return the builder.
type Responses struct {
	id, model  string
	background bool
	seq        int64
	events     []Event
	output     []map[string]any
	usage      map[string]any
	status     string
}

// NewResponses starts a stream for response id: response.created (sequence
// 0) and response.in_progress (sequence 1).
func NewResponses(id, model string, background bool) *Responses {
	r := &Responses{id: id, model: model, background: background, status: "in_progress"}
	r.add("response.created", map[string]any{"response": r.object()})
	r.add("response.in_progress", map[string]any{"response": r.object()})
	return r
}

func (r *Responses) add(name string, fields map[string]any) {
	fields["type"] = name
	fields["sequence_number"] = r.seq
	r.events = append(r.events, Event{Name: name, Data: mustJSON(fields), Seq: r.seq})
	r.seq++
}

// Text adds an assistant message item streamed as output_text deltas.
func (r *Responses) Text(deltas ...string) *Responses {
	idx := len(r.output)
	itemID := fmt.Sprintf("msg_%d", idx)
	full := strings.Join(deltas, "")
	r.add("response.output_item.added", map[string]any{"output_index": idx,
		"item": map[string]any{"id": itemID, "type": "message", "status": "in_progress", "role": "assistant", "content": []any{}}})
	r.add("response.content_part.added", map[string]any{"item_id": itemID, "output_index": idx, "content_index": 0,
		"part": map[string]any{"type": "output_text", "text": "", "annotations": []any{}}})
	for _, d := range deltas {
		r.add("response.output_text.delta", map[string]any{"item_id": itemID, "output_index": idx, "content_index": 0, "delta": d, "logprobs": []any{}})
	}
	part := map[string]any{"type": "output_text", "text": full, "annotations": []any{}}
	r.add("response.output_text.done", map[string]any{"item_id": itemID, "output_index": idx, "content_index": 0, "text": full, "logprobs": []any{}})
	r.add("response.content_part.done", map[string]any{"item_id": itemID, "output_index": idx, "content_index": 0, "part": part})
	item := map[string]any{"id": itemID, "type": "message", "status": "completed", "role": "assistant", "content": []any{part}}
	r.add("response.output_item.done", map[string]any{"output_index": idx, "item": item})
	r.output = append(r.output, item)
	return r
}

// Reasoning adds a reasoning item streamed as reasoning summary deltas.
func (r *Responses) Reasoning(deltas ...string) *Responses {
	idx := len(r.output)
	itemID := fmt.Sprintf("rs_%d", idx)
	full := strings.Join(deltas, "")
	r.add("response.output_item.added", map[string]any{"output_index": idx,
		"item": map[string]any{"id": itemID, "type": "reasoning", "summary": []any{}}})
	for _, d := range deltas {
		r.add("response.reasoning_summary_text.delta", map[string]any{"item_id": itemID, "output_index": idx, "summary_index": 0, "delta": d})
	}
	r.add("response.reasoning_summary_text.done", map[string]any{"item_id": itemID, "output_index": idx, "summary_index": 0, "text": full})
	item := map[string]any{"id": itemID, "type": "reasoning", "summary": []any{map[string]any{"type": "summary_text", "text": full}}}
	r.add("response.output_item.done", map[string]any{"output_index": idx, "item": item})
	r.output = append(r.output, item)
	return r
}

// FunctionCall adds a function_call item whose arguments stream as deltas.
func (r *Responses) FunctionCall(callID, name string, argDeltas ...string) *Responses {
	idx := len(r.output)
	itemID := fmt.Sprintf("fc_%d", idx)
	args := strings.Join(argDeltas, "")
	r.add("response.output_item.added", map[string]any{"output_index": idx,
		"item": map[string]any{"id": itemID, "type": "function_call", "status": "in_progress", "arguments": "", "call_id": callID, "name": name}})
	for _, d := range argDeltas {
		r.add("response.function_call_arguments.delta", map[string]any{"item_id": itemID, "output_index": idx, "delta": d})
	}
	r.add("response.function_call_arguments.done", map[string]any{"item_id": itemID, "output_index": idx, "arguments": args, "name": name})
	item := map[string]any{"id": itemID, "type": "function_call", "status": "completed", "arguments": args, "call_id": callID, "name": name}
	r.add("response.output_item.done", map[string]any{"output_index": idx, "item": item})
	r.output = append(r.output, item)
	return r
}

// Error adds an error event, as the API sends for a failure mid-stream.
func (r *Responses) Error(code, message string) *Responses {
	r.add("error", map[string]any{"code": code, "message": message, "param": nil})
	return r
}

// Completed adds response.completed with the accumulated output and usage.
func (r *Responses) Completed(inputTokens, outputTokens int64) *Responses {
	r.status = "completed"
	r.usage = map[string]any{
		"input_tokens": inputTokens, "input_tokens_details": map[string]any{"cached_tokens": 0},
		"output_tokens": outputTokens, "output_tokens_details": map[string]any{"reasoning_tokens": 0},
		"total_tokens": inputTokens + outputTokens,
	}
	r.add("response.completed", map[string]any{"response": r.object()})
	return r
}

// Cut appends a Cut pseudo-event.
func (r *Responses) Cut() *Responses {
	r.events = append(r.events, Cut())
	return r
}

// Events returns the events built so far.
func (r *Responses) Events() []Event { return append([]Event(nil), r.events...) }

// LastSeq returns the sequence number of the last event added.
func (r *Responses) LastSeq() int64 { return r.seq - 1 }

// Object returns the response object as GET /responses/{id} returns it,
// with the given status ("in_progress", "completed", ...).
func (r *Responses) Object(status string) string {
	o := r.object()
	o["status"] = status
	return mustJSON(o)
}

func (r *Responses) object() map[string]any {
	output := make([]any, 0, len(r.output))
	for _, item := range r.output {
		output = append(output, item)
	}
	var usage any
	if r.usage != nil {
		usage = r.usage
	}
	return map[string]any{
		"id": r.id, "object": "response", "created_at": 1741290958, "status": r.status,
		"background": r.background, "error": nil, "incomplete_details": nil, "instructions": nil,
		"max_output_tokens": nil, "model": r.model, "output": output, "parallel_tool_calls": true,
		"previous_response_id": nil, "store": true, "temperature": 1.0,
		"text": map[string]any{"format": map[string]any{"type": "text"}}, "tool_choice": "auto",
		"tools": []any{}, "top_p": 1.0, "truncation": "disabled", "usage": usage, "metadata": map[string]any{},
	}
}

// After returns the events with a sequence number above seq, as
// GET /responses/{id}?stream=true&starting_after=seq streams them.
func After(events []Event, seq int64) []Event {
	var out []Event
	for _, e := range events {
		if e.Seq > seq {
			out = append(out, e)
		}
	}
	return out
}
