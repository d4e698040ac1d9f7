package llm

import (
	"context"
	"fmt"
	"hash/fnv"
	"iter"
	"strings"
	"time"
)

// DefaultLocalRate is the Local model's speed when LocalConfig.Rate is 0.
const DefaultLocalRate = 30

// LocalConfig configures the built-in local model.
type LocalConfig struct {
	// Rate is the output speed in tokens (words) per second. 0 means
	// DefaultLocalRate; a negative rate means as fast as possible (tests).
	Rate float64
}

// Validate reports a bad config; every LocalConfig is valid.
func (c LocalConfig) Validate() error { return nil }

// Local is a deterministic model that needs no network, for demos and
// tests. It answers the last user message of a request: a few hundred words
// of story when the message mentions "story", a short reply addressing the
// message otherwise. The same message always gives the same answer, so a
// Continuation with the PartialText already received yields exactly the
// rest: partial + continuation == full answer. Tools are ignored.
//
// Local is safe for concurrent use.
type Local struct {
	interval time.Duration // 0: no pacing
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
	return &Local{interval: iv}
}

// Name returns "local".
func (l *Local) Name() string { return "local" }

// Answer returns the full deterministic answer the model gives to req,
// ignoring req.Continue. Tests use it to check streamed text.
func (l *Local) Answer(req Request) string { return localAnswer(lastUserText(req.Messages)) }

// Stream yields a ResponseMeta delta, the answer (or its rest after
// req.Continue.PartialText) one token per TextDelta at the configured rate,
// and a Finish delta with Usage. It stops as soon as ctx is done and yields
// the context's cause. A PartialText that is not a prefix of the answer
// yields a terminal *Error wrapping ErrContinuation.
func (l *Local) Stream(ctx context.Context, req Request) iter.Seq2[Delta, error] {
	return stream(func(s *sink) error {
		if err := ctxErr(ctx); err != nil {
			return err
		}
		prompt := lastUserText(req.Messages)
		full := localAnswer(prompt)
		start := 0
		if c := req.Continue; c != nil && c.PartialText != "" {
			if !strings.HasPrefix(full, c.PartialText) {
				return &Error{Provider: l.Name(), Err: fmt.Errorf("%w: partial text is not a prefix of the answer", ErrContinuation)}
			}
			start = len(c.PartialText)
		}
		h := fnv.New64a()
		h.Write([]byte(prompt))
		if !s.send(Delta{Kind: ResponseMeta, ResponseID: fmt.Sprintf("local-%016x", h.Sum64())}) {
			return nil
		}
		var pieces []string
		prev := start
		for _, end := range tokenEnds(full) {
			if end > start {
				pieces = append(pieces, full[prev:end])
				prev = end
			}
		}
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
					return context.Cause(ctx)
				case <-timer.C:
				}
			}
			if err := ctxErr(ctx); err != nil {
				return err
			}
			if !s.send(Delta{Kind: TextDelta, Text: p}) {
				return nil
			}
		}
		var in int64
		for _, m := range req.Messages {
			in += countWords(messageText(m))
		}
		in += countWords(req.System)
		s.send(Delta{Kind: Finish, FinishReason: FinishStop, Usage: &Usage{InputTokens: in, OutputTokens: int64(len(pieces))}})
		return nil
	})
}

// lastUserText is the text of the last user message that is not a
// ContinuePrompt.
func lastUserText(msgs []Message) string {
	for i := len(msgs) - 1; i >= 0; i-- {
		if t := messageText(msgs[i]); msgs[i].Role == RoleUser && t != ContinuePrompt {
			return t
		}
	}
	return ""
}
