package chat

import (
	"context"
	"encoding/json"
)

// WithFunc returns a copy of t (its name, description, schema, safety and
// approval rule) whose calls run fn instead: the input is still validated
// against the schema first. An agent tool's copy runs fn too, not a child
// agent. Package chat/chatreplay uses it to answer a replayed turn's tool
// calls with their recorded results, so a replay has no side effect.
func (t *Tool) WithFunc(fn func(ctx context.Context, input json.RawMessage) (json.RawMessage, error)) *Tool {
	c := *t
	c.run = fn
	c.sub = nil
	return &c
}
