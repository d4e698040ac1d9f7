package mcptools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/forever-agents/forever/chat"
)

// MetaIdempotencyKey is the key under which each tools/call request
// carries the call's idempotency key (chat.ToolCall.IdempotencyKey) in its
// _meta. Every run of one model call, after any number of crashes and
// reconnections, sends the same key.
const MetaIdempotencyKey = "forever/idempotency-key"

// The ToolError types of MCP tools, besides those chat makes itself
// ("invalid_input", "timeout", ...).
const (
	// ErrorTypeUnavailable: the server could not be reached, or its
	// session failed during the call (process exit, EOF, HTTP error). The
	// message names the server. Retryable when the request was never sent
	// or the tool is Idempotent.
	ErrorTypeUnavailable = "mcp_unavailable"
	// ErrorTypeTool: the tool answered isError, or the server answered the
	// request with a JSON-RPC error (such as an unknown tool). The message
	// is the server's text. Not retryable.
	ErrorTypeTool = "mcp_error"
)

// ChatToolName returns the name of the chat tool for the MCP tool tool of
// server: "<server>__<tool>".
func ChatToolName(server, tool string) string { return server + ToolSeparator + tool }

// Safety returns the chat safety of an MCP tool: Idempotent when its
// annotations say readOnlyHint or idempotentHint, Unsafe otherwise.
func Safety(t *mcp.Tool) chat.Safety {
	if a := t.Annotations; a != nil && (a.ReadOnlyHint || a.IdempotentHint) {
		return chat.Idempotent
	}
	return chat.Unsafe
}

// chatTool makes the chat tool that calls t on c's server.
func (c *conn) chatTool(t *mcp.Tool) (*chat.Tool, error) {
	schema, err := json.Marshal(t.InputSchema)
	if err != nil {
		return nil, fmt.Errorf("encode input schema: %w", err)
	}
	if string(schema) == "null" {
		schema = nil
	}
	safety := Safety(t)
	opts := []chat.ToolOption{chat.WithSafety(safety), chat.WithSource("mcp:" + c.srv.Name)}
	if c.cfg.ToolTimeout > 0 {
		opts = append(opts, chat.WithTimeout(c.cfg.ToolTimeout))
	}
	name := t.Name
	return chat.NewRawTool(ChatToolName(c.srv.Name, name), t.Description, schema,
		func(ctx context.Context, input json.RawMessage) (json.RawMessage, error) {
			tc, _ := chat.ToolCallFrom(ctx)
			return c.call(ctx, name, safety, tc.IdempotencyKey, input)
		}, opts...)
}

// call runs the MCP tool name with input, passing key (the call's
// idempotency key, if not empty) in _meta, and returns its result as the
// chat tool's output.
func (c *conn) call(ctx context.Context, name string, safety chat.Safety, key string, input json.RawMessage) (json.RawMessage, error) {
	cs, err := c.session(ctx, true)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, &chat.ToolError{
			Type: ErrorTypeUnavailable,
			Message: fmt.Sprintf("MCP server %q is unavailable (%v); the tool did not run. The server will be reconnected on a later call.",
				c.srv.Name, err),
			Retryable: true,
			Err:       err,
		}
	}
	params := &mcp.CallToolParams{Name: name, Arguments: input}
	if key != "" {
		params.Meta = mcp.Meta{MetaIdempotencyKey: key}
	}
	res, err := cs.CallTool(ctx, params)
	if err != nil {
		if ctx.Err() != nil {
			// Cut off by the tool's timeout or the turn's end: chat says so.
			return nil, ctx.Err()
		}
		if answered(err) {
			return nil, &chat.ToolError{Type: ErrorTypeTool, Message: fmt.Sprintf("MCP server %q: %v", c.srv.Name, err), Err: err}
		}
		c.forget(cs, err)
		msg := fmt.Sprintf("MCP server %q failed during the call (%v)", c.srv.Name, err)
		if safety == chat.Unsafe {
			msg += "; whether the call took effect is unknown"
		}
		msg += ". The server will be reconnected on the next call."
		return nil, &chat.ToolError{Type: ErrorTypeUnavailable, Message: msg, Retryable: safety == chat.Idempotent, Err: err}
	}
	if res.IsError {
		text := contentText(res.Content)
		if text == "" {
			text = "the tool reported an error without a message"
		}
		return nil, &chat.ToolError{Type: ErrorTypeTool, Message: text}
	}
	out, err := resultJSON(res)
	if err != nil {
		return nil, &chat.ToolError{Type: "invalid_output", Message: fmt.Sprintf("encode the result of MCP tool %q: %v", name, err), Err: err}
	}
	return out, nil
}

// answered reports whether err is the server's JSON-RPC error answer to the
// request, as opposed to a failure of the session (the SDK also reports a
// closed connection with JSON-RPC codes, which are not answers).
func answered(err error) bool {
	if errors.Is(err, mcp.ErrConnectionClosed) {
		return false
	}
	var we *jsonrpc.Error
	if !errors.As(err, &we) {
		return false
	}
	switch we.Code {
	case -32003, -32004, -32005: // client closing, server closing, rejected by transport
		return false
	}
	return true
}

// resultJSON is what the model sees of a successful result: the structured
// content when there is some; else the text of the content when every part
// is text (the parts joined with newlines, as a JSON string); else the
// content array itself; and null for a result with no content.
func resultJSON(res *mcp.CallToolResult) (json.RawMessage, error) {
	if res.StructuredContent != nil {
		return json.Marshal(res.StructuredContent)
	}
	if len(res.Content) == 0 {
		return json.RawMessage("null"), nil
	}
	texts := make([]string, 0, len(res.Content))
	for _, p := range res.Content {
		tc, ok := p.(*mcp.TextContent)
		if !ok {
			return json.Marshal(res.Content)
		}
		texts = append(texts, tc.Text)
	}
	return json.Marshal(strings.Join(texts, "\n"))
}

// contentText returns the text parts of content joined with newlines, and
// any other part as its JSON.
func contentText(content []mcp.Content) string {
	parts := make([]string, 0, len(content))
	for _, p := range content {
		if tc, ok := p.(*mcp.TextContent); ok {
			parts = append(parts, tc.Text)
			continue
		}
		if b, err := json.Marshal(p); err == nil {
			parts = append(parts, string(b))
		}
	}
	return strings.Join(parts, "\n")
}
