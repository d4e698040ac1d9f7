package llmtest

// Anthropic builds an Anthropic Messages stream: message_start, content
// blocks (content_block_start, content_block_delta, content_block_stop),
// message_delta with usage, message_stop. Methods append events and return
// the builder.
type Anthropic struct {
	id, model string
	index     int
	events    []Event
}

// NewAnthropic starts a stream with message_start (reporting inputTokens)
// and a ping.
func NewAnthropic(id, model string, inputTokens int64) *Anthropic {
	a := &Anthropic{id: id, model: model}
	a.add("message_start", map[string]any{"message": map[string]any{
		"id": id, "type": "message", "role": "assistant", "content": []any{}, "model": model,
		"stop_reason": nil, "stop_sequence": nil,
		"usage": map[string]any{"input_tokens": inputTokens, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0, "output_tokens": 1},
	}})
	a.add("ping", map[string]any{})
	return a
}

func (a *Anthropic) add(name string, fields map[string]any) {
	fields["type"] = name
	a.events = append(a.events, Event{Name: name, Data: mustJSON(fields), Seq: -1})
}

func (a *Anthropic) block(start map[string]any, deltaType, field string, deltas []string) {
	i := a.index
	a.index++
	a.add("content_block_start", map[string]any{"index": i, "content_block": start})
	for _, d := range deltas {
		a.add("content_block_delta", map[string]any{"index": i, "delta": map[string]any{"type": deltaType, field: d}})
	}
	if deltaType == "thinking_delta" {
		a.add("content_block_delta", map[string]any{"index": i, "delta": map[string]any{"type": "signature_delta", "signature": "sig"}})
	}
	a.add("content_block_stop", map[string]any{"index": i})
}

// Text adds a text block streamed as text_delta events.
func (a *Anthropic) Text(deltas ...string) *Anthropic {
	a.block(map[string]any{"type": "text", "text": ""}, "text_delta", "text", deltas)
	return a
}

// Thinking adds a thinking block streamed as thinking_delta events and a
// signature_delta.
func (a *Anthropic) Thinking(deltas ...string) *Anthropic {
	a.block(map[string]any{"type": "thinking", "thinking": "", "signature": ""}, "thinking_delta", "thinking", deltas)
	return a
}

// ToolUse adds a tool_use block whose input streams as input_json_delta
// events.
func (a *Anthropic) ToolUse(id, name string, jsonDeltas ...string) *Anthropic {
	a.block(map[string]any{"type": "tool_use", "id": id, "name": name, "input": map[string]any{}}, "input_json_delta", "partial_json", jsonDeltas)
	return a
}

// Stop adds message_delta (stop reason, output usage) and message_stop.
func (a *Anthropic) Stop(reason string, outputTokens int64) *Anthropic {
	a.add("message_delta", map[string]any{
		"delta": map[string]any{"stop_reason": reason, "stop_sequence": nil},
		"usage": map[string]any{"output_tokens": outputTokens},
	})
	a.add("message_stop", map[string]any{})
	return a
}

// Error adds an error event, such as ("overloaded_error", "Overloaded").
func (a *Anthropic) Error(typ, message string) *Anthropic {
	a.events = append(a.events, Event{Name: "error", Data: anthropicErrorJSON(typ, message), Seq: -1})
	return a
}

// Cut appends a Cut pseudo-event.
func (a *Anthropic) Cut() *Anthropic {
	a.events = append(a.events, Cut())
	return a
}

// Events returns the events built so far.
func (a *Anthropic) Events() []Event { return append([]Event(nil), a.events...) }

func anthropicErrorJSON(typ, message string) string {
	return mustJSON(map[string]any{"type": "error", "error": map[string]any{"type": typ, "message": message}})
}
