package openai

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/param"
	"github.com/openai/openai-go/v3/responses"

	"github.com/forever-agents/forever/chat/llm"
)

// recover continues the response req.Continue.ResponseID. It first
// retrieves the response: a background response still queued or running is
// streamed again from after Continue.SequenceNumber (GET
// /responses/{id}?stream=true&starting_after=N); any other response is
// finished from its stored output.
func (p *Responses) recover(ctx context.Context, req llm.Request, s *llm.Sink) error {
	c := req.Continue
	resp, err := p.svc.Get(ctx, c.ResponseID, responses.ResponseGetParams{}, requestOptions(req)...)
	if err != nil {
		return openAIError(ctx, p.Name(), err)
	}
	running := resp.Status == responses.ResponseStatusQueued || resp.Status == responses.ResponseStatusInProgress
	if running && resp.Background {
		// The SDK sends stream=true in a JSON body, which a GET does not
		// carry reliably; the API reads it from the query.
		st := p.svc.GetStreaming(ctx, c.ResponseID, responses.ResponseGetParams{
			StartingAfter: param.NewOpt(c.SequenceNumber),
		}, append(requestOptions(req), option.WithQuery("stream", "true"))...)
		// Text the caller stored after SequenceNumber comes again: skip it.
		if skip := len(c.PartialText) - c.TextAtSequence; c.TextAtSequence > 0 && skip > 0 {
			s = skipText(s, skip)
		}
		// Argument deltas of a call that started before SequenceNumber
		// name it by item id only.
		calls := map[string]responsesCall{}
		for _, item := range resp.Output {
			if item.Type == "function_call" {
				calls[item.ID] = responsesCall{callID: item.CallID, name: item.Name}
			}
		}
		return p.consume(ctx, st, s, c.ResponseID, calls)
	}
	switch resp.Status {
	case responses.ResponseStatusCompleted, responses.ResponseStatusIncomplete:
		return p.finishStored(resp, c, s)
	case responses.ResponseStatusFailed:
		code := string(resp.Error.Code)
		return &llm.Error{Provider: p.Name(), Retryable: retryableOpenAICode(code), Code: code,
			Err: fmt.Errorf("response %s failed: %s", resp.ID, resp.Error.Message)}
	case responses.ResponseStatusQueued, responses.ResponseStatusInProgress:
		return &llm.Error{Provider: p.Name(), Retryable: true, Err: fmt.Errorf("%w: %s is %s", llm.ErrNotReady, resp.ID, resp.Status)}
	default:
		return &llm.Error{Provider: p.Name(), Err: fmt.Errorf("%w: response %s is %s", llm.ErrContinuation, resp.ID, resp.Status)}
	}
}

// finishStored yields the stored response's text after c.PartialText, its
// function calls, and a Finish delta.
func (p *Responses) finishStored(resp *responses.Response, c *llm.Continuation, s *llm.Sink) error {
	text := resp.OutputText()
	if !strings.HasPrefix(text, c.PartialText) {
		return &llm.Error{Provider: p.Name(), Err: fmt.Errorf("%w: partial text is not a prefix of stored response %s", llm.ErrContinuation, resp.ID)}
	}
	base := llm.Delta{ResponseID: resp.ID, SequenceNumber: c.SequenceNumber}
	meta := base
	meta.Kind = llm.ResponseMeta
	if !s.Send(meta) {
		return nil
	}
	if rest := text[len(c.PartialText):]; rest != "" {
		d := base
		d.Kind, d.Text = llm.TextDelta, rest
		if !s.Send(d) {
			return nil
		}
	}
	for _, item := range resp.Output {
		if item.Type != "function_call" {
			continue
		}
		d := base
		d.Kind, d.ToolCallID, d.ToolName = llm.ToolCallDone, item.CallID, item.Name
		d.Input = json.RawMessage(llm.RawInput(json.RawMessage(item.Arguments.OfString)))
		if !s.Send(d) {
			return nil
		}
	}
	fin := base
	fin.Kind = llm.Finish
	fin.FinishReason = responseFinishReason(*resp, false)
	fin.Usage = &llm.Usage{InputTokens: resp.Usage.InputTokens, OutputTokens: resp.Usage.OutputTokens}
	s.Send(fin)
	return nil
}

// skipText returns a sink over s that drops the first n bytes of text
// deltas.
func skipText(s *llm.Sink, n int) *llm.Sink {
	return llm.NewSink(func(d llm.Delta, err error) bool {
		if d.Kind == llm.TextDelta && n > 0 {
			if len(d.Text) <= n {
				n -= len(d.Text)
				return true
			}
			d.Text, n = d.Text[n:], 0
		}
		if !s.Send(d) {
			return false
		}
		return true
	})
}
