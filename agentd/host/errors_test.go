package host

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/forever-agents/forever/eventlog"
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
