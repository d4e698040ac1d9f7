package llm_test

import (
	"context"
	"fmt"

	"github.com/forever-agents/forever/chat/llm"
)

// A chat layer streams a turn, and after an interruption continues it from
// the text it already has.
func ExampleProvider_continue() {
	var p llm.Provider = llm.NewLocal(llm.LocalConfig{Rate: -1})
	req := llm.Request{Messages: []llm.Message{llm.Text(llm.RoleUser, "Hello there")}}

	// First attempt: interrupted after three tokens.
	var partial string
	n := 0
	for d, err := range p.Stream(context.Background(), req) {
		if err != nil {
			fmt.Println("retryable:", llm.IsRetryable(err))
			return
		}
		if d.Kind == llm.TextDelta {
			partial += d.Text
			if n++; n == 3 {
				break
			}
		}
	}

	// Continue the same turn.
	req.Continue = &llm.Continuation{PartialText: partial}
	full := partial
	for d, err := range p.Stream(context.Background(), req) {
		if err != nil {
			fmt.Println("retryable:", llm.IsRetryable(err))
			return
		}
		switch d.Kind {
		case llm.TextDelta:
			full += d.Text
		case llm.Finish:
			fmt.Println("finish:", d.FinishReason)
		}
	}
	fmt.Println(full == p.(*llm.Local).Answer(req))
	// Output:
	// finish: stop
	// true
}

// An agent loop with the local model: a /tool line makes it call the tool,
// and once the result is back it answers by quoting it.
func ExampleLocal_tools() {
	p := llm.NewLocal(llm.LocalConfig{Rate: -1})
	req := llm.Request{Messages: []llm.Message{
		llm.Text(llm.RoleUser, "What is the weather?\n/tool weather {\"city\":\"Oslo\"}"),
	}}
	for {
		var calls []llm.ToolCall
		var text string
		for d, err := range p.Stream(context.Background(), req) {
			if err != nil {
				fmt.Println(err)
				return
			}
			switch d.Kind {
			case llm.TextDelta:
				text += d.Text
			case llm.ToolCallDone:
				calls = append(calls, llm.ToolCall{ID: d.ToolCallID, Name: d.ToolName, Input: d.Input})
			}
		}
		if len(calls) == 0 {
			fmt.Println(text)
			return
		}
		assistant := llm.Message{Role: llm.RoleAssistant}
		results := llm.Message{Role: llm.RoleTool}
		for _, c := range calls {
			fmt.Printf("call %s(%s)\n", c.Name, c.Input)
			assistant.Parts = append(assistant.Parts, llm.Part{ToolCall: &c})
			results.Parts = append(results.Parts, llm.Part{ToolResult: &llm.ToolResult{CallID: c.ID, Output: "snow"}})
		}
		req.Messages = append(req.Messages, assistant, results)
	}
	// Output:
	// call weather({"city":"Oslo"})
	// The weather tool returned: snow.
}
