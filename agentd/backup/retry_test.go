package backup

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestTransient: a restore retries an API call's timeout and a cluster's
// "temporarily unavailable", and nothing else, and never once its own
// context ended.
func TestTransient(t *testing.T) {
	live := context.Background()
	done, cancel := context.WithCancel(live)
	cancel()
	for _, c := range []struct {
		ctx  context.Context
		err  error
		want bool
	}{
		{live, context.DeadlineExceeded, true},
		{live, fmt.Errorf("stream info: %w", nats.ErrTimeout), true},
		{live, &jetstream.APIError{Code: 503, ErrorCode: 10008}, true},
		{live, &jetstream.APIError{Code: 404, ErrorCode: jetstream.JSErrCodeStreamNotFound}, false},
		{live, errors.New("insufficient resources"), false},
		{done, context.DeadlineExceeded, false},
	} {
		if got := transient(c.ctx, c.err); got != c.want {
			t.Errorf("transient(ctx alive %v, %v) = %v, want %v", c.ctx.Err() == nil, c.err, got, c.want)
		}
	}
}

// TestLostRace: a restore tries again when the stream's name or store was
// someone else's at that moment (agentd healed the stream, a deleted
// stream's files were being removed), and not for any other error.
func TestLostRace(t *testing.T) {
	for _, c := range []struct {
		desc string
		want bool
	}{
		{"stream name already in use with a different configuration", true},
		{"restore failed: expected sequence does not match store", true},
		{"restore failed: error adding stream: could not create storage directory - mkdir /data/jetstream/$G/streams: no such file or directory (10077)", true},
		{"restore failed: error purging stream: no message cache", true},
		{"insufficient resources", false},
	} {
		err := fmt.Errorf("restore FOREVER_EVENTS: %w", &apiError{Code: 500, ErrCode: 10062, Description: c.desc})
		if got := lostRace(err); got != c.want {
			t.Errorf("lostRace(%q) = %v, want %v", c.desc, got, c.want)
		}
	}
	if lostRace(errors.New("could not create storage directory")) {
		t.Error("lostRace of an error that is not JetStream's")
	}
}
