package replay_test

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/forever-agents/forever/chat"
	"github.com/forever-agents/forever/chat/chunk"
	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/replay"
)

// TestStatusCodeOfChatErrors: chat's errors keep their HTTP codes now that
// replay no longer imports chat (they carry the code themselves).
func TestStatusCodeOfChatErrors(t *testing.T) {
	for _, c := range []struct {
		err  error
		want int
	}{
		{chat.ErrEmptyMessage, http.StatusBadRequest},
		{chat.ErrInvalidMessage, http.StatusBadRequest},
		{chat.ErrNotFound, http.StatusNotFound},
		{chunk.ErrUnknownStream, http.StatusNotFound},
		{chunk.ErrUnknownStream, http.StatusNotFound},
		{chat.ErrTurnActive, http.StatusConflict},
		{chat.ErrDuplicateMessage, http.StatusConflict},
		{chat.ErrVersionConflict, http.StatusConflict},
		{chat.ErrNoAssistantMessage, http.StatusConflict},
		{fmt.Errorf("%w: %w", chat.ErrTooLarge, eventlog.ErrTooLarge), http.StatusRequestEntityTooLarge},
		{chat.ErrRecoveryExhausted, http.StatusInternalServerError},
	} {
		if got := replay.StatusCode(fmt.Errorf("send: %w", c.err)); got != c.want {
			t.Errorf("StatusCode(%v) = %d, want %d", c.err, got, c.want)
		}
	}
}
