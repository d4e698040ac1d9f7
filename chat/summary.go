package chat

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/forever-agents/forever/chat/llm"
	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/fiber"
)

// EventContextSummarized records a summary of an agent's conversation up to
// a message, which model calls read instead of those messages (see
// Config.ContextTokens): {upto, text, tokens, requestId, input?, output?}.
// upto is the id of the last message it covers, tokens the text's
// estimated tokens, requestId the turn that made it, input and output the
// summary call's usage. The context view keeps the latest; an agent's
// conversation is not changed by it.
const EventContextSummarized = "context.summarized"

// ContextProjectionName is the view of each agent's latest summary.
const ContextProjectionName = "context"

// maxSummaryBytes bounds a stored summary's text; a longer one is cut.
const maxSummaryBytes = 128 << 10

// Summary is a context.summarized: what model calls read instead of the
// messages up to Upto.
type Summary struct {
	Upto      string `json:"upto"`
	Text      string `json:"text"`
	Tokens    int    `json:"tokens"`
	RequestID string `json:"requestId,omitempty"`
	Input     int64  `json:"input,omitempty"`
	Output    int64  `json:"output,omitempty"`
}

// summaryKey is the context view's row of agent's latest Summary: c\0<agent>.
func summaryKey(agent string) []byte { return []byte("c\x00" + agent) }

// ContextProjection keeps each agent's latest context.summarized. It is a
// view of its own, so that a node upgraded from a release without it
// builds it from the whole log, summaries written meanwhile by newer
// nodes included; a node of that release ignores the event.
func ContextProjection() eventlog.Projection {
	return eventlog.Projection{Name: ContextProjectionName, Version: 1, Filter: eventlog.Filter{}, Apply: applyContext,
		AgentRows: agentRows(keys(summaryKey), nil)}
}

func applyContext(b *eventlog.Batch, e eventlog.Event) error {
	if e.Type != EventContextSummarized {
		return nil
	}
	var s Summary
	if !decodeData(e, &s) || s.Upto == "" {
		return nil
	}
	return setJSON(b, summaryKey(e.Agent), s)
}

// Summary returns agent's latest summary, and false when it has none.
func (s *Store) Summary(agent string) (Summary, bool, error) {
	var sum Summary
	if s.context == nil {
		return sum, false, nil
	}
	ok, err := getJSON(s.context, summaryKey(agent), &sum)
	return sum, ok, err
}

// summaryStepKey is the fiber.Step key of the summary up to message upto:
// a recovered turn finds the summary its earlier run made.
func summaryStepKey(upto string) string { return "summary:" + upto }

// pointSummaryRecorded: the summary step's result is recorded,
// context.summarized not appended.
const pointSummaryRecorded = "summary-recorded"

// contextBudget is the agent's context budget in tokens, 0 for none.
func (a *Agent) contextBudget() int {
	switch {
	case a.cfg.ContextTokens < 0:
		return 0
	case a.cfg.ContextTokens > 0:
		return a.cfg.ContextTokens
	}
	return llm.ContextTokensOf(a.cfg.Provider)
}

// modelInput is what a model call of st is given of history: the
// conversation and the system prompt when they fit the context budget;
// otherwise the system prompt with the summary, and the newest messages
// after it that fit. A summary that is due is made first (makeSummary).
func (st *turnRun) modelInput(ctx context.Context, lp *loop, history []Message) (msgs []Message, system string, err error) {
	a := st.a
	budget := a.contextBudget()
	if budget <= 0 {
		return history, a.cfg.System, nil
	}
	conv := make([]Message, 0, len(history))
	for _, m := range history {
		if m.ID != st.info.AssistantMessageID {
			conv = append(conv, m)
		}
	}
	tokens := make([]int, len(conv))
	for i, m := range conv {
		tokens[i] = messageTokens(m)
	}
	sysTokens := llm.EstimateTokens(a.cfg.System)
	stored, ok, err := a.store.Summary(a.agent)
	if err != nil {
		return nil, "", err
	}
	if !ok {
		stored = Summary{}
	}
	p := planContext(budget, sysTokens, tokens, conv, stored.Upto)
	if p.whole {
		return history, a.cfg.System, nil
	}
	sum, start := stored, p.covered
	if p.covered == 0 {
		sum = Summary{} // none, or one of messages truncated since
	}
	if p.cut > p.covered {
		if sum, err = st.makeSummary(ctx, lp, sum, conv[p.covered:p.cut], conv[p.cut-1].ID); err != nil {
			return nil, "", err
		}
		start = p.cut
	}
	system = a.cfg.System
	used := sysTokens
	if sum.Upto != "" {
		system = withSummary(a.cfg.System, sum.Text)
		used = llm.EstimateTokens(system)
	}
	from := fitFrom(budget, used, tokens, conv, start)
	a.logger.Debug("model context cut", "request", st.info.RequestID, "messages", len(conv)-from, "of", len(conv),
		"summaryUpto", sum.Upto, "budget", budget)
	return conv[from:], system, nil
}

// makeSummary summarises prev (the stored summary, if any) and msgs, up to
// message upto, as a fiber step: the summary is made once, and a turn
// recovered after it was made reuses the recorded result. It is then
// stored as context.summarized, unless the view shows it already.
func (st *turnRun) makeSummary(ctx context.Context, lp *loop, prev Summary, msgs []Message, upto string) (Summary, error) {
	a := st.a
	input := msgs
	if prev.Upto != "" {
		input = append([]Message{{Role: RoleUser, Parts: []Part{{Type: PartText, Text: summaryHeader + prev.Text}}}}, msgs...)
	}
	sum, err := fiber.StepJSON(ctx, summaryStepKey(upto), func(ctx context.Context, _ string) (Summary, error) {
		text, usage, err := a.summarize(ctx, input)
		if err != nil {
			return Summary{}, err
		}
		if len(text) > maxSummaryBytes {
			text = strings.ToValidUTF8(text[:maxSummaryBytes], "")
		}
		return Summary{Upto: upto, Text: text, Tokens: llm.EstimateTokens(text), RequestID: st.info.RequestID,
			Input: usage.InputTokens, Output: usage.OutputTokens}, nil
	})
	if err != nil {
		return Summary{}, fmt.Errorf("chat: summarize the conversation: %w", err)
	}
	// The summary call counts in the step's usage (and so in budgets).
	lp.usage.InputTokens += sum.Input
	lp.usage.OutputTokens += sum.Output
	if err := a.crashPoint(ctx, pointSummaryRecorded); err != nil {
		return Summary{}, err
	}
	if cur, ok, err := a.store.Summary(a.agent); err != nil {
		return Summary{}, err
	} else if ok && cur.Upto == upto {
		return cur, nil
	}
	if _, err := a.append(ctx, EventContextSummarized, sum); err != nil {
		return Summary{}, err
	}
	return sum, nil
}

// summarize makes the summary of msgs: Config.Summarize when set,
// otherwise the agent's own model, asked with llm.SummarizePrompt after
// the messages.
func (a *Agent) summarize(ctx context.Context, msgs []Message) (string, llm.Usage, error) {
	if a.cfg.Summarize != nil {
		// msgs may share their parts with the history cache
		// (historyShared): the hook gets copies it may change.
		text, err := a.cfg.Summarize(ctx, cloneParts(msgs))
		return text, llm.Usage{}, err
	}
	req := llm.Request{Model: a.cfg.Model, System: a.cfg.System,
		Messages: append(toLLM(msgs), llm.Text(llm.RoleUser, llm.SummarizePrompt))}
	var b strings.Builder
	var usage llm.Usage
	for d, err := range a.cfg.Provider.Stream(ctx, req) {
		if err != nil {
			if ctx.Err() != nil {
				return "", usage, context.Cause(ctx)
			}
			return "", usage, err
		}
		switch d.Kind {
		case llm.TextDelta:
			b.WriteString(d.Text)
		case llm.Finish:
			if d.Usage != nil {
				usage = *d.Usage
			}
			if b.Len() == 0 {
				return "", usage, errors.New("chat: the model answered the summary request with no text")
			}
			return b.String(), usage, nil
		}
	}
	if ctx.Err() != nil {
		return "", usage, context.Cause(ctx)
	}
	return "", usage, &llm.Error{Provider: a.cfg.Provider.Name(), Retryable: true, Err: llm.ErrStreamCut}
}

// SnapshotSummaries decodes the summaries in one agent snapshot part of the
// context view (eventlog.Snapshot.Views[ContextProjectionName]): for
// readers of the log alone (package verify).
func SnapshotSummaries(sv eventlog.SnapshotView) ([]Summary, error) {
	var out []Summary
	for _, kv := range sv.Rows {
		if !strings.HasPrefix(string(kv.Key), "c\x00") {
			continue
		}
		var s Summary
		if err := json.Unmarshal(kv.Value, &s); err != nil {
			return nil, corrupt("summary row in a snapshot", err)
		}
		out = append(out, s)
	}
	return out, nil
}
