package chat

import (
	"context"
	"time"

	"github.com/forever-agents/forever/chat/llm"
)

// ModelLimiter shares the model's rate limits between the turns of the
// process's tenants (package modellimit's Tenant satisfies it). A turn
// waits in Wait before each model call, and reports the call's end to
// done with its usage and error: a rate-limited answer (llm.RateLimited)
// slows every caller of the model, and the turn tries again through Wait
// instead of failing or counting a recovery attempt.
type ModelLimiter interface {
	// Wait blocks until a call of model, estimated at tokens input
	// tokens, may start; it returns ctx's cause when ctx ends first.
	// done must be called once when the call ends.
	Wait(ctx context.Context, model string, tokens int64) (done func(llm.Usage, error), err error)
}

// ModelWait says that the agent's turn is waiting for the model's rate
// limit (Config.Limiter) before its next model call: queued behind other
// tenants' calls, or held after the provider answered rate limited.
type ModelWait struct {
	// Since is when the turn began to wait; Model what for.
	Since time.Time `json:"since"`
	Model string    `json:"model"`
	// RateLimited: the provider's last answer to this turn was rate
	// limited (429 or overloaded), with RetryAfter the wait it asked for.
	RateLimited bool          `json:"rateLimited,omitempty"`
	RetryAfter  time.Duration `json:"retryAfterNs,omitempty"`
}

// modelKey names the model of req as the limiter keys it: the provider
// and the model, "openai/gpt-4.1".
func (a *Agent) modelKey(req llm.Request) string {
	m := req.Model
	if m == "" {
		m = a.modelName()
	}
	return a.cfg.Provider.Name() + "/" + m
}

// requestTokens estimates the input tokens of req (llm.EstimateTokens).
func requestTokens(req llm.Request) int64 {
	n := llm.EstimateTokens(req.System)
	for _, m := range req.Messages {
		for _, p := range m.Parts {
			n += llm.EstimateTokens(p.Text)
			if p.ToolCall != nil {
				n += llm.EstimateTokens(string(p.ToolCall.Input))
			}
			if p.ToolResult != nil {
				n += llm.EstimateTokens(p.ToolResult.Output)
			}
		}
		n += 4
	}
	return int64(n)
}

// waitModel waits for the limiter before a model call of the run (a no-op
// without one), showing the wait in Status meanwhile, and returns how long
// it waited; last is the error of the turn's previous call of this step,
// nil for none.
func (st *turnRun) waitModel(ctx context.Context, req llm.Request, last error) (done func(llm.Usage, error), waited time.Duration, err error) {
	a := st.a
	if a.cfg.Limiter == nil {
		return func(llm.Usage, error) {}, 0, nil
	}
	w := &ModelWait{Since: a.cfg.Clock.Now(), Model: a.modelKey(req)}
	if llm.RateLimited(last) {
		w.RateLimited, w.RetryAfter = true, llm.RetryAfterOf(last)
	}
	a.mu.Lock()
	st.modelWait = w
	a.mu.Unlock()
	defer func() {
		a.mu.Lock()
		st.modelWait = nil
		a.mu.Unlock()
	}()
	done, err = a.cfg.Limiter.Wait(ctx, w.Model, requestTokens(req))
	return done, a.cfg.Clock.Now().Sub(w.Since), err
}

// modelWaiting returns the wait for the limiter of the run that holds the
// slot, nil when it is not waiting.
func (a *Agent) modelWaiting() *ModelWait {
	a.mu.Lock()
	defer a.mu.Unlock()
	at := a.mu.active
	if at == nil || at.run == nil || at.run.modelWait == nil {
		return nil
	}
	w := *at.run.modelWait
	return &w
}
