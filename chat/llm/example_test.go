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
