package chat

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/forever-agents/forever/chat/llm"
)

// ErrInvalidTool is returned (wrapped, with the tool's name and the reason)
// by NewTool, NewRawTool and NewTools for a tool that cannot be offered to
// a model: a bad name, an input type or schema that is not a JSON object,
// a bad option, or a name used twice. MustTool panics with it.
var ErrInvalidTool = errors.New("chat: invalid tool")

// maxToolName is the longest tool name OpenAI and Anthropic accept.
const maxToolName = 64

// Tool is a server tool: a Go function the model may call, with the JSON
// Schema of its input, its description, and how it runs (timeout, retry,
// approval, output limit, Safety). Make one with NewTool, MustTool or
// NewRawTool and offer it to an agent through a Tools registry.
//
// A Tool is immutable and safe for concurrent use; one Tool may serve any
// number of agents and calls at once, so its function must be safe for
// concurrent use too.
type Tool struct {
	name        string
	description string
	schema      json.RawMessage // the input schema as offered to the model
	resolved    *jsonschema.Resolved
	run         func(ctx context.Context, input json.RawMessage) (json.RawMessage, error)
	opts        toolOptions
	// sub is set on an agent tool (NewAgentTool, AgentTool): its calls run
	// child agents' turns instead of run.
	sub *agentTool
}

// NewTool makes a server tool from a typed Go function. The tool's input
// schema is generated from In by github.com/google/jsonschema-go: the
// fields of a struct become properties named by their json tags, fields
// without omitempty or omitzero are required, other properties are
// rejected, and a field's jsonschema tag is its description:
//
//	type WeatherIn struct {
//		City string `json:"city" jsonschema:"the city, in English"`
//		Days int    `json:"days,omitempty" jsonschema:"days of forecast, 1 if omitted"`
//	}
//
// In must be a struct, a map with string keys, a pointer to one of those,
// or any (which accepts any JSON object); anything else (a chan, a func, a
// string) makes NewTool fail with ErrInvalidTool. The model's input is
// validated against the schema, then decoded into In with encoding/json;
// fn's result is encoded with encoding/json and is what the model sees.
//
// name must match ^[a-zA-Z0-9_-]{1,64}$, which OpenAI and Anthropic accept.
// description tells the model what the tool does and when to use it.
// Errors wrap ErrInvalidTool and name the tool.
func NewTool[In, Out any](name, description string, fn func(ctx context.Context, in In) (Out, error), opts ...ToolOption) (*Tool, error) {
	if err := validToolName(name); err != nil {
		return nil, err
	}
	if fn == nil {
		return nil, fmt.Errorf("%w: tool %q: nil function", ErrInvalidTool, name)
	}
	s, err := inputSchema[In]()
	if err != nil {
		return nil, fmt.Errorf("%w: tool %q: %v", ErrInvalidTool, name, err)
	}
	schema, err := json.Marshal(s)
	if err != nil {
		return nil, fmt.Errorf("%w: tool %q: encode input schema: %v", ErrInvalidTool, name, err)
	}
	run := func(ctx context.Context, input json.RawMessage) (json.RawMessage, error) {
		var in In
		if err := json.Unmarshal(input, &in); err != nil {
			return nil, &ToolError{Type: "invalid_input", Message: "decode input: " + err.Error(), Err: err}
		}
		out, err := fn(ctx, in)
		if err != nil {
			return nil, err
		}
		b, err := json.Marshal(out)
		if err != nil {
			return nil, &ToolError{Type: "invalid_output", Message: "encode output: " + err.Error(), Err: err}
		}
		return b, nil
	}
	return newTool(name, description, s, schema, run, opts)
}

// MustTool is NewTool for package-level declarations: it panics where
// NewTool returns an error.
func MustTool[In, Out any](name, description string, fn func(ctx context.Context, in In) (Out, error), opts ...ToolOption) *Tool {
	t, err := NewTool(name, description, fn, opts...)
	if err != nil {
		panic(err)
	}
	return t
}

// NewRawTool makes a server tool whose input schema comes from elsewhere,
// such as a tool of an MCP server. schema is a JSON Schema (draft 2020-12
// or draft-07) whose top level is an object schema ({"type": "object",
// ...}); an empty schema means {"type": "object"}, any object. It is
// offered to the model as given, and the model's input is validated
// against it before fn runs. fn gets the input as JSON and returns its
// output as JSON; an empty output means null.
//
// name must match ^[a-zA-Z0-9_-]{1,64}$: a caller that prefixes tools with
// their server's name ("srv__tool") must keep within it. Errors wrap
// ErrInvalidTool and name the tool.
func NewRawTool(name, description string, schema json.RawMessage, fn func(ctx context.Context, input json.RawMessage) (json.RawMessage, error), opts ...ToolOption) (*Tool, error) {
	if err := validToolName(name); err != nil {
		return nil, err
	}
	if fn == nil {
		return nil, fmt.Errorf("%w: tool %q: nil function", ErrInvalidTool, name)
	}
	if len(bytes.TrimSpace(schema)) == 0 {
		schema = json.RawMessage(`{"type":"object"}`)
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, schema); err != nil {
		return nil, fmt.Errorf("%w: tool %q: schema is not JSON: %v", ErrInvalidTool, name, err)
	}
	s := new(jsonschema.Schema)
	if err := json.Unmarshal(compact.Bytes(), s); err != nil {
		return nil, fmt.Errorf("%w: tool %q: schema: %v", ErrInvalidTool, name, err)
	}
	if s.Type != "object" {
		return nil, fmt.Errorf("%w: tool %q: schema is not an object schema (its top level needs \"type\": \"object\")", ErrInvalidTool, name)
	}
	return newTool(name, description, s, compact.Bytes(), fn, opts)
}

// inputSchema generates the input schema of a tool taking In.
func inputSchema[In any]() (*jsonschema.Schema, error) {
	rt := reflect.TypeFor[In]()
	if rt == reflect.TypeFor[any]() {
		return &jsonschema.Schema{Type: "object"}, nil
	}
	if rt.Kind() == reflect.Pointer {
		// A nil *In decodes from null, which is no input: describe In itself.
		rt = rt.Elem()
	}
	s, err := jsonschema.ForType(rt, nil)
	if err != nil {
		return nil, fmt.Errorf("input schema of %v: %v", reflect.TypeFor[In](), err)
	}
	if s.Type != "object" {
		return nil, fmt.Errorf("input type %v is not a JSON object (want a struct or a map with string keys; use NewRawTool for a schema of your own)", reflect.TypeFor[In]())
	}
	return s, nil
}

// newTool checks what NewTool and NewRawTool share and makes the Tool.
func newTool(name, description string, s *jsonschema.Schema, schema json.RawMessage, run func(context.Context, json.RawMessage) (json.RawMessage, error), opts []ToolOption) (*Tool, error) {
	o, err := resolveToolOptions(opts)
	if err != nil {
		return nil, fmt.Errorf("%w: tool %q: %v", ErrInvalidTool, name, err)
	}
	resolved, err := s.Resolve(nil)
	if err != nil {
		return nil, fmt.Errorf("%w: tool %q: resolve input schema: %v", ErrInvalidTool, name, err)
	}
	return &Tool{name: name, description: description, schema: schema, resolved: resolved, run: run, opts: o}, nil
}

// validToolName checks name against ^[a-zA-Z0-9_-]{1,64}$.
func validToolName(name string) error {
	if name == "" || len(name) > maxToolName {
		return fmt.Errorf("%w: tool name %q: want 1 to %d characters", ErrInvalidTool, name, maxToolName)
	}
	for _, c := range []byte(name) {
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '_', c == '-':
		default:
			return fmt.Errorf("%w: tool name %q: only letters, digits, '_' and '-' are allowed", ErrInvalidTool, name)
		}
	}
	return nil
}

// Name returns the name the model calls the tool by.
func (t *Tool) Name() string { return t.name }

// Def returns the tool's definition as offered to the model: its name,
// description and input schema. The caller owns the returned Schema.
func (t *Tool) Def() llm.Tool {
	return llm.Tool{Name: t.name, Description: t.description, Schema: slices.Clone(t.schema)}
}

// SourceGo is the source of a tool made without WithSource.
const SourceGo = "go"

// Approval modes of ToolInfo.
const (
	ApprovalNever   = "never"    // no call waits for a person
	ApprovalAlways  = "always"   // AlwaysNeedsApproval
	ApprovalByInput = "by-input" // WithApproval: calls whose input says so
)

// ToolInfo describes a tool for people: what it is called, what it does,
// whether a call may run again after a crash, when a call waits for
// approval, and where it comes from.
type ToolInfo struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	// Safety is "idempotent" or "unsafe" (Safety.String).
	Safety string `json:"safety"`
	// Approval is ApprovalNever, ApprovalAlways or ApprovalByInput.
	Approval string `json:"approval"`
	// Source is WithSource's, SourceGo by default.
	Source string `json:"source"`
}

// Info describes the tool.
func (t *Tool) Info() ToolInfo {
	approval := ApprovalNever
	switch {
	case t.opts.always:
		approval = ApprovalAlways
	case t.opts.approval != nil:
		approval = ApprovalByInput
	}
	return ToolInfo{Name: t.name, Description: t.description, Safety: t.opts.safety.String(), Approval: approval, Source: t.opts.source}
}

// Safety returns whether the tool may run again for a call whose outcome
// is unknown (WithSafety).
func (t *Tool) Safety() Safety { return t.opts.safety }

// needsApproval reports whether a call of the tool with input must wait
// for a person's approval. A predicate that panics means yes.
func (t *Tool) needsApproval(input json.RawMessage) (needs bool) {
	if t.opts.approval == nil {
		return false
	}
	defer func() {
		if recover() != nil {
			needs = true
		}
	}()
	return t.opts.approval(input)
}

// call runs the tool for one model call with the model's input. It
// validates the input against the schema (an invalid one fails with
// ToolError "invalid_input" and the function does not run), then runs the
// function, each attempt under the tool's timeout and with
// ToolCall.Attempt set in its ctx (ctx carries the rest of the ToolCall),
// retrying retryable failures per the tool's RetryPolicy with backoff
// waits that end with ctx. It returns the output as JSON, at most the
// tool's maximum output.
//
// A failure of the tool is a *ToolError. When ctx ends (shutdown,
// cancellation of the turn) call returns ctx.Err() itself, never a
// *ToolError, so the caller can tell the two apart: the outcome of an
// attempt cut short that way is unknown.
func (t *Tool) call(ctx context.Context, input json.RawMessage) (json.RawMessage, error) {
	input, te := t.validate(input)
	if te != nil {
		return nil, te
	}
	tc, _ := ToolCallFrom(ctx)
	if tc.ToolName == "" {
		tc.ToolName = t.name
	}
	p := t.opts.retry
	for attempt := 1; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		tc.Attempt = attempt
		out, te := t.attempt(withToolCall(ctx, tc), input)
		if te == nil {
			return out, nil
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if !te.Retryable || p.nonRetryable(te.Type) || attempt >= p.MaximumAttempts {
			return nil, te
		}
		wait := time.NewTimer(p.backoff(attempt))
		select {
		case <-ctx.Done():
			wait.Stop()
			return nil, ctx.Err()
		case <-wait.C:
		}
	}
}

// validate checks the model's input against the tool's schema and returns
// it, with no input (empty or null) made the empty object.
func (t *Tool) validate(input json.RawMessage) (json.RawMessage, *ToolError) {
	if trimmed := bytes.TrimSpace(input); len(trimmed) == 0 || string(trimmed) == "null" {
		input = json.RawMessage(`{}`)
	}
	var v map[string]any
	if err := json.Unmarshal(input, &v); err != nil {
		return nil, &ToolError{Type: "invalid_input", Message: "input is not a JSON object: " + err.Error(), Err: err}
	}
	if err := t.resolved.Validate(v); err != nil {
		return nil, &ToolError{Type: "invalid_input", Message: "input does not match the tool's schema: " + err.Error(), Err: err}
	}
	return input, nil
}

// attempt runs the tool's function once under the per-attempt timeout and
// classifies its failure.
func (t *Tool) attempt(ctx context.Context, input json.RawMessage) (json.RawMessage, *ToolError) {
	actx, cancel := context.WithTimeout(ctx, t.opts.timeout)
	defer cancel()
	out, err := t.runGuarded(actx, input)
	if err == nil {
		if len(bytes.TrimSpace(out)) == 0 {
			out = json.RawMessage(`null`)
		}
		if !json.Valid(out) {
			return nil, &ToolError{Type: "invalid_output", Message: fmt.Sprintf("tool %s returned output that is not JSON", t.name)}
		}
		if len(out) > t.opts.maxOutput {
			return nil, &ToolError{Type: "output_too_large", Message: fmt.Sprintf("tool %s returned %d bytes of output, more than its limit of %d bytes", t.name, len(out), t.opts.maxOutput)}
		}
		return out, nil
	}
	var te *ToolError
	if errors.As(err, &te) {
		return nil, te
	}
	if errors.Is(actx.Err(), context.DeadlineExceeded) && ctx.Err() == nil {
		// The attempt ran out of its time, whatever error that caused.
		te := &ToolError{Type: "timeout", Message: fmt.Sprintf("tool %s did not finish within %v", t.name, t.opts.timeout), Err: err}
		if t.opts.safety == Idempotent {
			te.Retryable = true
		} else {
			te.Message += "; its outcome is unknown"
		}
		return nil, te
	}
	return nil, &ToolError{Type: "error", Message: err.Error(), Err: err}
}

// runGuarded runs the tool's function, turning a panic into a ToolError
// "panic" (its Err holds the stack) so that one bad tool call does not
// take the agent's process down.
func (t *Tool) runGuarded(ctx context.Context, input json.RawMessage) (out json.RawMessage, err error) {
	defer func() {
		if r := recover(); r != nil {
			out, err = nil, &ToolError{
				Type:    "panic",
				Message: fmt.Sprintf("tool %s panicked: %v", t.name, r),
				Err:     fmt.Errorf("panic: %v\n%s", r, debug.Stack()),
			}
		}
	}()
	return t.run(ctx, input)
}

// ToolError is a failed tool call as the model is shown it: the tool's
// output is an error of Type with Message. A tool function may return one
// to choose what the model sees; any other error it returns becomes a
// ToolError of Type "error" with the error's text as Message.
//
// The Types this package makes are:
//
//   - "invalid_input": the model's input is not a JSON object, does not
//     match the tool's schema, or does not decode into its input type; the
//     function did not run.
//   - "error": the function failed.
//   - "timeout": an attempt ran out of the tool's timeout (WithTimeout).
//     Retryable only for Idempotent tools: for an Unsafe tool the outcome
//     is unknown.
//   - "output_too_large": the output is larger than the tool's maximum
//     (WithMaxOutput); Message names both sizes.
//   - "invalid_output": the output could not be encoded as JSON.
//   - "panic": the function panicked; Err holds the panic value and stack.
//
// Retryable says whether the call may be tried again (see RetryPolicy);
// it is decided where the error is made, never by reading its text.
type ToolError struct {
	// Type is a short, stable class of the error, such as "timeout".
	Type string
	// Message is what the model is told.
	Message string
	// Retryable marks an error after which another attempt may succeed.
	Retryable bool
	// Err is the cause, if any. It is for logs and errors.Is, not shown to
	// the model.
	Err error
}

// Error returns Type and Message, or Err's text when Message is empty.
func (e *ToolError) Error() string {
	msg := e.Message
	if msg == "" && e.Err != nil {
		msg = e.Err.Error()
	}
	if e.Type == "" {
		return msg
	}
	return e.Type + ": " + msg
}

// Unwrap returns Err.
func (e *ToolError) Unwrap() error { return e.Err }

// RetryableError marks err, returned by a tool function, as retryable:
// the call is tried again if the tool's RetryPolicy allows another
// attempt. A tool marks an error retryable only when a second attempt
// cannot repeat a side effect of the first (the request was refused, or
// is idempotent). Errors not marked are final. RetryableError returns a
// *ToolError: err itself, copied with Retryable set, if err is a
// *ToolError; otherwise one of Type "error" with err's text as Message and
// err as Err. RetryableError(nil) is nil.
func RetryableError(err error) error {
	if err == nil {
		return nil
	}
	if te, ok := err.(*ToolError); ok {
		c := *te
		c.Retryable = true
		return &c
	}
	return &ToolError{Type: "error", Message: err.Error(), Retryable: true, Err: err}
}

// ToolCall describes the model's call that a tool function runs for. The
// function's ctx carries it: see ToolCallFrom.
type ToolCall struct {
	// Agent is the agent whose turn made the call.
	Agent string
	// RequestID is the id of the turn's request.
	RequestID string
	// CallID is the model's id of the call within the turn.
	CallID string
	// ToolName is the tool's name.
	ToolName string
	// IdempotencyKey is the same for every run of this call, across
	// attempts and across recoveries after a crash: ToolIdempotencyKey of
	// Agent, RequestID and CallID. Idempotent tools pass it on to what they
	// change.
	IdempotencyKey string
	// Attempt is the 1-based attempt of the call within this run of it; it
	// starts again at 1 after a recovery.
	Attempt int
}

// toolCallKey is the context key of a ToolCall.
type toolCallKey struct{}

// ToolCallFrom returns the ToolCall a tool function runs for, from the ctx
// the function was given. ok is false for a ctx that carries none.
func ToolCallFrom(ctx context.Context) (c ToolCall, ok bool) {
	c, ok = ctx.Value(toolCallKey{}).(ToolCall)
	return c, ok
}

// withToolCall returns ctx carrying c, with c.IdempotencyKey derived if it
// is empty.
func withToolCall(ctx context.Context, c ToolCall) context.Context {
	if c.IdempotencyKey == "" {
		c.IdempotencyKey = ToolIdempotencyKey(c.Agent, c.RequestID, c.CallID)
	}
	return context.WithValue(ctx, toolCallKey{}, c)
}

// ToolIdempotencyKey is the idempotency key of the tool call callID in
// agent's turn requestID: 32 hex characters of a SHA-256 of the three and
// the domain tag "tool". It depends on nothing else, so every run of the
// call, after any number of recoveries, gets the same key, and no two
// calls share one.
func ToolIdempotencyKey(agent, requestID, callID string) string {
	h := sha256.Sum256([]byte(strings.Join([]string{"tool", agent, requestID, callID}, "\x00")))
	return hex.EncodeToString(h[:16])
}

// Tools is a registry of server tools by name: the tools an agent offers
// to the model. Make one with NewTools. A Tools is immutable and safe for
// concurrent use; a nil *Tools is an empty registry.
type Tools struct {
	byName map[string]*Tool
	defs   []llm.Tool // sorted by name
}

// NewTools makes a registry of tools. It fails with ErrInvalidTool for a
// nil tool, a Tool not made by NewTool, MustTool or NewRawTool, or two
// tools of the same name.
func NewTools(tools ...*Tool) (*Tools, error) {
	ts := &Tools{byName: make(map[string]*Tool, len(tools))}
	for i, t := range tools {
		if t == nil || t.run == nil {
			return nil, fmt.Errorf("%w: tool %d of %d is not a tool made by NewTool or NewRawTool", ErrInvalidTool, i+1, len(tools))
		}
		if _, dup := ts.byName[t.name]; dup {
			return nil, fmt.Errorf("%w: tool %q: the name is used twice", ErrInvalidTool, t.name)
		}
		ts.byName[t.name] = t
		ts.defs = append(ts.defs, t.Def())
	}
	slices.SortFunc(ts.defs, func(a, b llm.Tool) int { return strings.Compare(a.Name, b.Name) })
	return ts, nil
}

// Lookup returns the tool named name.
func (ts *Tools) Lookup(name string) (*Tool, bool) {
	if ts == nil {
		return nil, false
	}
	t, ok := ts.byName[name]
	return t, ok
}

// Defs returns the definitions of the tools, sorted by name, to offer to
// the model. The caller owns the returned slice and may modify it.
func (ts *Tools) Defs() []llm.Tool {
	if ts == nil || len(ts.defs) == 0 {
		return nil
	}
	defs := make([]llm.Tool, len(ts.defs))
	for i, d := range ts.defs {
		d.Schema = slices.Clone(d.Schema)
		defs[i] = d
	}
	return defs
}

// Infos describes the tools, sorted by name, as the tools verb lists them.
func (ts *Tools) Infos() []ToolInfo {
	out := []ToolInfo{}
	if ts == nil {
		return out
	}
	for _, d := range ts.defs {
		out = append(out, ts.byName[d.Name].Info())
	}
	return out
}

// Len returns the number of tools.
func (ts *Tools) Len() int {
	if ts == nil {
		return 0
	}
	return len(ts.byName)
}
