package chat

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"time"
)

// Defaults of a server tool's options.
const (
	// DefaultToolTimeout is how long one attempt of a tool may run unless
	// WithTimeout says otherwise.
	DefaultToolTimeout = 60 * time.Second
	// DefaultMaxToolOutput is the largest JSON output, in bytes, a tool may
	// return unless WithMaxOutput says otherwise: 256 KiB.
	DefaultMaxToolOutput = 256 << 10
)

// Safety says whether a tool may run again after a crash left the outcome of
// a call unknown: the process died after the tool started and before its
// result was recorded, or an attempt timed out while the tool was running.
type Safety uint8

const (
	// Unsafe is the default. An Unsafe tool is never re-run silently: after
	// a crash the model is told that the outcome of the call is unknown, and
	// an attempt that timed out is not retried (see WithRetry).
	Unsafe Safety = iota
	// Idempotent tools may run again for the same call. Every run of one
	// call sees the same ToolCall.IdempotencyKey, which the tool passes on to
	// whatever it changes (an Idempotency-Key header, a unique row id) so
	// that a second run does not repeat the change.
	Idempotent
)

// String returns "unsafe" or "idempotent".
func (s Safety) String() string {
	switch s {
	case Unsafe:
		return "unsafe"
	case Idempotent:
		return "idempotent"
	default:
		return fmt.Sprintf("Safety(%d)", uint8(s))
	}
}

// RetryPolicy says how often, and how far apart, the attempts of one tool
// call run. It is shaped like the RetryPolicy of Temporal's ActivityOptions;
// unlike Temporal's, it is always bounded: a zero MaximumAttempts means one
// attempt, never "unlimited".
//
// An attempt that fails is retried when its error is retryable: an error
// the tool function marked with RetryableError, a *ToolError with
// Retryable set, or (for Idempotent tools only) an attempt that ran out of
// its timeout. Errors whose ToolError.Type is listed in
// NonRetryableErrorTypes are never retried. The zero RetryPolicy means no
// retry.
type RetryPolicy struct {
	// InitialInterval is the wait before the second attempt. Zero means 1s.
	InitialInterval time.Duration
	// BackoffCoefficient multiplies the wait after each further attempt.
	// Zero means 2.0; otherwise it must be at least 1.
	BackoffCoefficient float64
	// MaximumInterval caps the wait between attempts. Zero means 100 times
	// InitialInterval; otherwise it must be at least InitialInterval.
	MaximumInterval time.Duration
	// MaximumAttempts is the most attempts one call makes, the first
	// included. Zero means 1: no retry. (Temporal's zero means unlimited;
	// a tool call here is always bounded.)
	MaximumAttempts int
	// NonRetryableErrorTypes lists ToolError.Type values that end the call
	// at once even when the error is marked retryable, such as "timeout".
	NonRetryableErrorTypes []string
}

// withDefaults returns p with its zero fields set to their defaults.
func (p RetryPolicy) withDefaults() RetryPolicy {
	if p.InitialInterval == 0 {
		p.InitialInterval = time.Second
	}
	if p.BackoffCoefficient == 0 {
		p.BackoffCoefficient = 2
	}
	if p.MaximumInterval == 0 {
		p.MaximumInterval = 100 * p.InitialInterval
	}
	if p.MaximumAttempts == 0 {
		p.MaximumAttempts = 1
	}
	return p
}

// validate reports a policy that cannot be used. p has its defaults set.
func (p RetryPolicy) validate() error {
	switch {
	case p.InitialInterval < 0:
		return fmt.Errorf("retry policy: negative initial interval %v", p.InitialInterval)
	case p.BackoffCoefficient < 1 || math.IsNaN(p.BackoffCoefficient) || math.IsInf(p.BackoffCoefficient, 0):
		return fmt.Errorf("retry policy: backoff coefficient %v, want at least 1", p.BackoffCoefficient)
	case p.MaximumInterval < p.InitialInterval:
		return fmt.Errorf("retry policy: maximum interval %v below the initial interval %v", p.MaximumInterval, p.InitialInterval)
	case p.MaximumAttempts < 0:
		return fmt.Errorf("retry policy: negative maximum attempts %d", p.MaximumAttempts)
	}
	return nil
}

// backoff returns the wait after the failed attempt attempt (1-based).
// p has its defaults set.
func (p RetryPolicy) backoff(attempt int) time.Duration {
	d := float64(p.InitialInterval) * math.Pow(p.BackoffCoefficient, float64(attempt-1))
	if d >= float64(p.MaximumInterval) {
		return p.MaximumInterval
	}
	return time.Duration(d)
}

// nonRetryable reports whether errors of type typ are never retried.
func (p RetryPolicy) nonRetryable(typ string) bool {
	return slices.Contains(p.NonRetryableErrorTypes, typ)
}

// ToolOption sets an option of one tool, in NewTool, MustTool and
// NewRawTool. Options are applied in order; a later one overrides an
// earlier one that sets the same thing.
type ToolOption func(*toolOptions)

// toolOptions are a tool's settings; zero values mean the defaults.
type toolOptions struct {
	safety    Safety
	timeout   time.Duration
	retry     RetryPolicy
	approval  func(input json.RawMessage) bool
	always    bool // approval is AlwaysNeedsApproval's
	maxOutput int
	source    string
}

// WithSafety says whether the tool may run again for a call whose outcome
// is unknown. The default is Unsafe.
func WithSafety(s Safety) ToolOption {
	return func(o *toolOptions) { o.safety = s }
}

// WithTimeout bounds each attempt of the tool: the tool function's ctx is
// done after d. The default is DefaultToolTimeout; d must not be negative.
// The tool function must return when its ctx is done: a function that
// ignores ctx holds up the turn until it returns.
func WithTimeout(d time.Duration) ToolOption {
	return func(o *toolOptions) { o.timeout = d }
}

// WithRetry sets the tool's retry policy. The default is one attempt.
func WithRetry(p RetryPolicy) ToolOption {
	return func(o *toolOptions) { o.retry = p }
}

// WithApproval makes a call of the tool wait for a person's approval when
// needs, given the call's input as the model wrote it, returns true. needs
// must be a pure function of the input, safe for concurrent use: it may be
// asked again for the same call after a restart. If needs panics the call
// needs approval.
func WithApproval(needs func(input json.RawMessage) bool) ToolOption {
	return func(o *toolOptions) { o.approval, o.always = needs, false }
}

// AlwaysNeedsApproval makes every call of the tool wait for a person's
// approval.
func AlwaysNeedsApproval() ToolOption {
	return func(o *toolOptions) {
		o.approval, o.always = func(json.RawMessage) bool { return true }, true
	}
}

// WithSource names where the tool comes from, as listings show it (the
// tools verb): "mcp:<server>" for an MCP server's, "demo" for agentd's demo
// tools, "agent" for a sub-agent. The default is "go", a tool of the
// program that embeds Forever.
func WithSource(source string) ToolOption {
	return func(o *toolOptions) { o.source = source }
}

// WithMaxOutput sets the largest JSON output, in bytes, the tool may
// return to the model; a larger output fails the call with a ToolError of
// Type "output_too_large". Zero means DefaultMaxToolOutput; n must not be
// negative.
func WithMaxOutput(n int) ToolOption {
	return func(o *toolOptions) { o.maxOutput = n }
}

// resolveToolOptions applies opts over the defaults and checks the result.
func resolveToolOptions(opts []ToolOption) (toolOptions, error) {
	var o toolOptions
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	if o.timeout < 0 {
		return o, fmt.Errorf("negative timeout %v", o.timeout)
	}
	if o.timeout == 0 {
		o.timeout = DefaultToolTimeout
	}
	if o.maxOutput < 0 {
		return o, fmt.Errorf("negative maximum output %d", o.maxOutput)
	}
	if o.source == "" {
		o.source = SourceGo
	}
	if o.maxOutput == 0 {
		o.maxOutput = DefaultMaxToolOutput
	}
	if o.safety > Idempotent {
		return o, fmt.Errorf("unknown safety %v", o.safety)
	}
	o.retry = o.retry.withDefaults()
	if err := o.retry.validate(); err != nil {
		return o, err
	}
	return o, nil
}
