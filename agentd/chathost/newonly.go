package chathost

import (
	"encoding/json"
)

// A stock AI SDK client (useChat) sends the whole conversation with every
// request, but a turn reads the model's input from the stored
// conversation, not from the body: only the body's last message is new
// (the user's message, or the assistant message answering client tools).
// So the gateway passes on the last message alone, and a turn stores the
// body's request context without any message: what a turn writes does not
// grow with the conversation, a forwarded command stays within one NATS
// message, and the HTTP body limit bounds the history, not one event.

// lastMessageOnly returns an AI SDK body {id, messages, ...} with messages
// cut to its last element; any other body is returned as it is (the chat
// command's own checks answer it).
func lastMessageOnly(body json.RawMessage) json.RawMessage {
	var fields map[string]json.RawMessage
	if json.Unmarshal(body, &fields) != nil || fields == nil {
		return body
	}
	var msgs []json.RawMessage
	if json.Unmarshal(fields["messages"], &msgs) != nil || len(msgs) < 2 {
		return body
	}
	last, err := json.Marshal(msgs[len(msgs)-1:])
	if err != nil {
		return body
	}
	fields["messages"] = last
	out, err := json.Marshal(fields)
	if err != nil {
		return body
	}
	return out
}

// requestContext is what a turn keeps of its request body: every field but
// the message ones (text, message, messages), which the turn stores as
// messages of the conversation, and multitask, which is the command's.
// nil when nothing else is left.
func requestContext(body json.RawMessage) json.RawMessage {
	var fields map[string]json.RawMessage
	if json.Unmarshal(body, &fields) != nil || fields == nil {
		return body
	}
	for _, k := range []string{"text", "message", "messages", "multitask"} {
		delete(fields, k)
	}
	if len(fields) == 0 {
		return nil
	}
	out, err := json.Marshal(fields)
	if err != nil {
		return body
	}
	return out
}
