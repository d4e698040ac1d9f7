package host

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/eventlog/eventlogtest"
	"github.com/forever-agents/forever/fiber"
)

// TestStatusCode: errors a client may retry (nobody ran the command) are
// 503, a silent owner is 504, and the rest keep their codes.
func TestStatusCode(t *testing.T) {
	for _, c := range []struct {
		err  error
		want int
	}{
		{fmt.Errorf("x: %w", ErrBadRequest), http.StatusBadRequest},
		{fmt.Errorf("x: %w", eventlog.ErrNotOwner), http.StatusServiceUnavailable},
		{fmt.Errorf("x: %w", eventlog.ErrFenced), http.StatusServiceUnavailable},
		{fmt.Errorf("x: %w", &jetstream.APIError{Code: 503, ErrorCode: 10008}), http.StatusServiceUnavailable},
		{fmt.Errorf("x: %w", jetstream.ErrNoStreamResponse), http.StatusServiceUnavailable},
		{fmt.Errorf("x: %w", nats.ErrNoResponders), http.StatusServiceUnavailable},
		{fmt.Errorf("%w: stopping: %w", ErrUnavailable, context.Canceled), http.StatusServiceUnavailable},
		{fmt.Errorf("%w: node n1", ErrTimeout), http.StatusGatewayTimeout},
		{fmt.Errorf("x: %w", eventlog.ErrUnconfirmed), http.StatusGatewayTimeout},
		{fmt.Errorf("chat: start turn: %w", fiber.ErrStopped), http.StatusServiceUnavailable},
		{&RemoteError{Code: http.StatusConflict, Msg: "busy"}, http.StatusConflict},
		{errors.New("boom"), http.StatusInternalServerError},
	} {
		if got := StatusCode(c.err); got != c.want {
			t.Errorf("StatusCode(%v) = %d, want %d", c.err, got, c.want)
		}
	}
}

// TestAppendNotSentIs503: an append whose deadline passed before it was
// sent wrote nothing, so a client may retry it: 503, as a wait for an
// owner that ends is, not a 500. Both append paths (a Log without an
// Owner, and a fenced one that waits for the agent's fence) are asked.
func TestAppendNotSentIs503(t *testing.T) {
	own := &eventlogtest.Owner{}
	own.Grant("a1", eventlog.Token{Node: "n1", Epoch: 1})
	plain, _ := eventlogtest.Open(t, eventlog.Config{})
	fenced, _ := eventlogtest.Open(t, eventlog.Config{Owner: own})
	ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	for name, lg := range map[string]*eventlog.Log{"plain": plain, "fenced": fenced} {
		_, err := lg.Append(ctx, eventlog.Event{Agent: "a1", Type: "tick", Data: []byte(`1`)})
		if err == nil {
			t.Fatalf("%s: append after its deadline stored it", name)
		}
		if got := StatusCode(err); got != http.StatusServiceUnavailable {
			t.Errorf("%s: StatusCode(%v) = %d, want 503", name, err, got)
		}
		if got := ClientError(err).Code; got != http.StatusServiceUnavailable {
			t.Errorf("%s: ClientError(%v).Code = %d, want 503", name, err, got)
		}
	}
}
