package llmtest

// Chat builds a Chat Completions stream: "data: {chat.completion.chunk}"
// lines and a final "data: [DONE]". Methods append chunks and return the
// builder.
type Chat struct {
	id, model string
	events    []Event
}

// NewChat starts a stream whose first chunk carries the assistant role.
func NewChat(id, model string) *Chat {
	c := &Chat{id: id, model: model}
	c.chunk(map[string]any{"role": "assistant", "content": ""}, nil)
	return c
}

func (c *Chat) chunk(delta map[string]any, finish any) {
	choice := map[string]any{"index": 0, "delta": delta, "logprobs": nil, "finish_reason": finish}
	c.add(map[string]any{"choices": []any{choice}})
}

func (c *Chat) add(fields map[string]any) {
	fields["id"] = c.id
	fields["object"] = "chat.completion.chunk"
	fields["created"] = 1741290958
	fields["model"] = c.model
	c.events = append(c.events, Event{Data: mustJSON(fields), Seq: -1})
}

// Text adds one chunk per content delta.
func (c *Chat) Text(deltas ...string) *Chat {
	for _, d := range deltas {
		c.chunk(map[string]any{"content": d}, nil)
	}
	return c
}

// Reasoning adds reasoning_content deltas, as vLLM and llama.cpp send.
func (c *Chat) Reasoning(deltas ...string) *Chat {
	for _, d := range deltas {
		c.chunk(map[string]any{"reasoning_content": d}, nil)
	}
	return c
}

// ToolCall adds a tool call at index: the first chunk carries id, type and
// name, the following ones argument fragments only.
func (c *Chat) ToolCall(index int, id, name string, argDeltas ...string) *Chat {
	c.chunk(map[string]any{"tool_calls": []any{map[string]any{
		"index": index, "id": id, "type": "function", "function": map[string]any{"name": name, "arguments": ""}}}}, nil)
	for _, d := range argDeltas {
		c.chunk(map[string]any{"tool_calls": []any{map[string]any{
			"index": index, "function": map[string]any{"arguments": d}}}}, nil)
	}
	return c
}

// Finish adds the chunk with finish_reason and an empty delta.
func (c *Chat) Finish(reason string) *Chat {
	c.chunk(map[string]any{}, reason)
	return c
}

// Usage adds the usage chunk (empty choices) sent when
// stream_options.include_usage is true.
func (c *Chat) Usage(prompt, completion int64) *Chat {
	c.add(map[string]any{"choices": []any{}, "usage": map[string]any{
		"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}})
	return c
}

// Error adds an error payload, as OpenAI-compatible servers send when a
// stream fails: data: {"error": {...}}.
func (c *Chat) Error(typ, code, message string) *Chat {
	c.events = append(c.events, Event{Data: mustJSON(map[string]any{"error": map[string]any{
		"message": message, "type": typ, "code": code, "param": nil}}), Seq: -1})
	return c
}

// Done adds the final "data: [DONE]".
func (c *Chat) Done() *Chat {
	c.events = append(c.events, Event{Data: "[DONE]", Seq: -1})
	return c
}

// Cut appends a Cut pseudo-event.
func (c *Chat) Cut() *Chat {
	c.events = append(c.events, Cut())
	return c
}

// Events returns the events built so far.
func (c *Chat) Events() []Event { return append([]Event(nil), c.events...) }
