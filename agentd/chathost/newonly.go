package chathost

import (
	"encoding/json"
)

// A stock AI SDK client (useChat) sends the whole conversation with every
// request, but a turn reads the model's input from the stored
// conversation, not from the body: only the body's last message is new
// (the user's message, or the assistant message answering client tools).
// The HTTP gateway reads the body as a stream and passes on the last
// message alone, with a summary of the earlier ones (replay.History, which
// reconcile compares with the stored conversation), and a turn stores the
// body's request context without any message: what a turn writes does not
// grow with the conversation, a forwarded command stays within one NATS
// message, and the HTTP body limit bounds the new message, not the
// history.

// requestContext is what a turn keeps of its request body: every field but
// the message ones (text, message, messages), which the turn stores as
// messages of the conversation, the summary of the earlier ones
// (history), and multitask and debounceMs, which are the command's. nil when nothing
// else is left.
func requestContext(body json.RawMessage) json.RawMessage {
	var fields map[string]json.RawMessage
	if json.Unmarshal(body, &fields) != nil || fields == nil {
		return body
	}
	for _, k := range []string{"text", "message", "messages", "history", "multitask", "debounceMs"} {
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
