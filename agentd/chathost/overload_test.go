package chathost

import (
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/forever-agents/forever/agentd/host"
	"github.com/forever-agents/forever/chat"
)

// TestOverloadedAnswersAtOnce: a turn refused by the node's --max-turns
// is 429 with Retry-After, and not host.ErrUnavailable, which the router
// retries for its handoff wait before answering 503.
func TestOverloadedAnswersAtOnce(t *testing.T) {
	err := chatError(fmt.Errorf("%w (2 running, the limit is 2)", chat.ErrOverloaded))
	if got, want := host.StatusCode(err), http.StatusTooManyRequests; got != want {
		t.Errorf("status = %d, want %d", got, want)
	}
	if errors.Is(err, host.ErrUnavailable) {
		t.Error("the refusal is ErrUnavailable: the router would retry it")
	}
	ce := host.ClientError(err)
	if ce.RetryAfter != time.Second || ce.Message != "too many turns running on this node, retry later (2 running, the limit is 2)" {
		t.Errorf("client error %q, Retry-After %s", ce.Message, ce.RetryAfter)
	}
}
