package llm

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"strings"
	"sync"
	"time"
)

// DefaultLocalRate is the Local model's speed when LocalConfig.Rate is 0.
const DefaultLocalRate = 30

// LocalConfig configures the built-in local model.
type LocalConfig struct {
	// Rate is the output speed in tokens (words) per second. 0 means
	// DefaultLocalRate; a negative rate means as fast as possible (tests).
	Rate float64
	// Limit, when set, makes the model behave like a provider over its
	// rate limit: at most Limit.Calls calls start per Limit.Per (fixed
	// windows from the first call); a call past it fails at once with a
	// retryable *Error of status 429, code "rate_limit_exceeded", and a
	// RetryAfter of the time left in the window rounded up to whole
	// seconds, as a Retry-After header would say it. Zero: no limit.
	Limit LocalLimit
}

// LocalLimit is a number of calls per period (LocalConfig.Limit).
type LocalLimit struct {
	Calls int
	Per   time.Duration
}

// ErrRateLimited is the cause of the 429 the local model answers past
// its LocalConfig.Limit.
var ErrRateLimited = errors.New("llm: rate limit exceeded")

// Validate reports a bad config; every LocalConfig is valid.
func (c LocalConfig) Validate() error { return nil }

// Local is a deterministic model that needs no network, for demos and
// tests. It answers the last user message of a request (the last RoleUser
// message that is not [ContinuePrompt]): a few hundred words of story when
// the message mentions "story", a short reply addressing the message
// otherwise. The same message always gives the same answer, so a
// Continuation with the PartialText already received yields exactly the
// rest: partial + continuation == full answer.
//
// # Tools
//
// Local ignores Request.Tools and calls the tools the user names instead.
// Each line of the last user message of the form
//
//	/tool <name> <arguments>
//
// asks for one call of tool <name> with the rest of the line, trimmed, as
// its input ("{}" when nothing follows the name). The input is passed on
// exactly as written, even when it is not valid JSON. A line
//
//	/agent <child id> <text>
//
// is the short form of "/tool agent {"agent": "<child id>", "text":
// "<text>"}" (LocalAgentTool: a sub-agent call). The model makes one call
// per step, in the order of the lines, and a line that starts with "+"
// ("+/tool ...", "+/agent ...") joins the step of the line before it, so
//
//	/agent a ask a
//	+/agent b ask b
//	/tool clock {}
//
// calls a and b in one step, then clock in the next. With k ToolResult
// parts in the messages after the user message and k below the number of
// lines, the step streams the input of line k and of the lines joined to
// it, each as ToolInputDelta pieces and a ToolCallDone, then a Finish with
// FinishToolCalls. The id of the call of line k is "call_" and 16 hex
// digits of an FNV-64a hash of the user message and k (see
// [Local.NextToolCall]). Once every line has a result, the model answers
// with one sentence per result, in order, joined by a space:
//
//	The <name> tool returned: <output>.
//	The <name> tool failed: <output>.     (for IsError results)
//
// except a sub-agent's result (an output {"agent": ..., "text": ...}),
// whose text is quoted as text, not as its JSON: "The <name> tool returned
// the answer of <agent>: <text>", only its beginning past 240 bytes (the
// tool's output, which clients show, holds it whole).
//
// where <name> is the name of the ToolCall with the result's CallID. That
// answer streams and continues like any other. A message without tool
// lines is answered as above whatever the history holds.
//
// Local is safe for concurrent use.
type Local struct {
	interval time.Duration // 0: no pacing
	limit    LocalLimit
	mu       struct {
		sync.Mutex
		window time.Time // start of the limit's current window
		calls  int       // calls started in it
	}
}

var _ Provider = (*Local)(nil)

// NewLocal returns a local model.
func NewLocal(cfg LocalConfig) *Local {
	rate := cfg.Rate
	if rate == 0 {
		rate = DefaultLocalRate
	}
	var iv time.Duration
	if rate > 0 {
		iv = time.Duration(float64(time.Second) / rate)
	}
	return &Local{interval: iv, limit: cfg.Limit}
}

// admit takes one call of the limit at now, or returns the 429 to answer.
func (l *Local) admit(now time.Time) error {
	if l.limit.Calls <= 0 || l.limit.Per <= 0 {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.mu.window.IsZero() || now.Sub(l.mu.window) >= l.limit.Per {
		l.mu.window, l.mu.calls = now, 0
	}
	if l.mu.calls < l.limit.Calls {
		l.mu.calls++
		return nil
	}
	left := l.mu.window.Add(l.limit.Per).Sub(now)
	wait := (left + time.Second - 1).Truncate(time.Second)
	return &Error{Provider: l.Name(), Retryable: true, Status: 429, Code: "rate_limit_exceeded", RetryAfter: wait,
		Err: fmt.Errorf("%w: %d calls per %s", ErrRateLimited, l.limit.Calls, l.limit.Per)}
}

// Name returns "local".
func (l *Local) Name() string { return "local" }

// ResumesByID reports false: the local model continues from the text so far.
func (l *Local) ResumesByID() bool { return false }

// Model returns "local": the local model has no other name.
func (l *Local) Model() string { return "local" }

// Answer returns the full deterministic text the model gives to req,
// ignoring req.Continue: the empty string when this step of req is a tool
// call. Tests use it to check streamed text.
func (l *Local) Answer(req Request) string { return planLocal(req.Messages).text }

// NextToolCall returns the (first) tool call the model makes for req, and
// false when its step answers with text instead. Tests use it to predict
// call ids and inputs. The caller owns the returned call.
func (l *Local) NextToolCall(req Request) (call ToolCall, ok bool) {
	calls := l.NextToolCalls(req)
	if len(calls) == 0 {
		return ToolCall{}, false
	}
	return calls[0], true
}

// NextToolCalls returns the tool calls the model makes in its step for req,
// in order; none when the step answers with text. The caller owns them.
func (l *Local) NextToolCalls(req Request) []ToolCall { return planLocal(req.Messages).calls }

// Stream yields a ResponseMeta delta, then either the answer (or its rest
// after req.Continue.PartialText) one token per TextDelta and a Finish with
// FinishStop, or, for a tool call step, the call's input in ToolInputDelta
// pieces, a ToolCallDone and a Finish with FinishToolCalls. Pieces come at
// the configured rate; Finish carries Usage (output tokens are the pieces
// yielded). A Continuation whose ResponseID is this answer's (a resumed
// response, as a turn recovered after a crash sends) reports the usage of
// the whole response, like an OpenAI Responses response resumed after a
// cut: the cut call reported none, so the turn's usage is the same as
// without the cut. It stops as soon as ctx is done and yields the context's
// cause.
// A PartialText that is not a prefix of the answer (any PartialText, for a
// tool call step) yields a terminal *Error wrapping ErrContinuation.
func (l *Local) Stream(ctx context.Context, req Request) iter.Seq2[Delta, error] {
	return NewStream("", func(s *Sink) error {
		if err := ContextErr(ctx); err != nil {
			return err
		}
		if err := l.admit(time.Now()); err != nil {
			return err
		}
		st := planLocal(req.Messages)
		start := 0
		if c := req.Continue; c != nil && c.PartialText != "" {
			if !strings.HasPrefix(st.text, c.PartialText) {
				return &Error{Provider: l.Name(), Err: fmt.Errorf("%w: partial text is not a prefix of the answer", ErrContinuation)}
			}
			start = len(c.PartialText)
		}
		if !s.Send(Delta{Kind: ResponseMeta, ResponseID: st.responseID()}) {
			return nil
		}
		usage := &Usage{InputTokens: localInputTokens(req)}
		if len(st.calls) > 0 {
			var sent int
			for _, c := range st.calls {
				pieces := argPieces(string(c.Input))
				sent += len(pieces)
				done, err := l.pace(ctx, s, pieces, func(p string) Delta {
					return Delta{Kind: ToolInputDelta, ToolCallID: c.ID, ToolName: c.Name, Text: p}
				})
				if err != nil || !done {
					return err
				}
				if !s.Send(Delta{Kind: ToolCallDone, ToolCallID: c.ID, ToolName: c.Name, Input: c.Input}) {
					return nil
				}
			}
			usage.OutputTokens = int64(sent)
			s.Send(Delta{Kind: Finish, FinishReason: FinishToolCalls, Usage: usage})
			return nil
		}
		var pieces []string
		prev, all := start, 0
		for _, end := range tokenEnds(st.text) {
			all++
			if end > start {
				pieces = append(pieces, st.text[prev:end])
				prev = end
			}
		}
		usage.OutputTokens = int64(len(pieces))
		if c := req.Continue; c != nil && c.ResponseID == st.responseID() {
			// Resuming the same response: its usage is the whole
			// response's, as a resumed Responses API response reports.
			usage.OutputTokens = int64(all)
		}
		done, err := l.pace(ctx, s, pieces, func(p string) Delta { return Delta{Kind: TextDelta, Text: p} })
		if err != nil || !done {
			return err
		}
		s.Send(Delta{Kind: Finish, FinishReason: FinishStop, Usage: usage})
		return nil
	})
}

// pace sends delta(p) for each piece, one every l.interval after the
// first. It reports false when the consumer stopped, and returns the
// context's cause when ctx ends first.
func (l *Local) pace(ctx context.Context, s *Sink, pieces []string, delta func(string) Delta) (bool, error) {
	var timer *time.Timer
	t0 := time.Now()
	for i, p := range pieces {
		if l.interval > 0 && i > 0 {
			wait := time.Until(t0.Add(time.Duration(i) * l.interval))
			if timer == nil {
				timer = time.NewTimer(wait)
				defer timer.Stop()
			} else {
				timer.Reset(wait)
			}
			select {
			case <-ctx.Done():
				return false, context.Cause(ctx)
			case <-timer.C:
			}
		}
		if err := ContextErr(ctx); err != nil {
			return false, err
		}
		if !s.Send(delta(p)) {
			return false, nil
		}
	}
	return true, nil
}

// lastUserIndex is the index of the last user message that is not a
// ContinuePrompt, or -1.
func lastUserIndex(msgs []Message) int {
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == RoleUser && msgs[i].PlainText() != ContinuePrompt {
			return i
		}
	}
	return -1
}
