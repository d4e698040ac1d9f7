package eventlog

import (
	"errors"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func TestUnavailable(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{ErrUnavailable, true},
		{fmt.Errorf("x: %w", &jetstream.APIError{Code: 503, ErrorCode: codeClusterUnavailable}), true},
		{fmt.Errorf("x: %w", jetstream.ErrNoStreamResponse), true},
		{nats.ErrNoResponders, true},
		{&jetstream.APIError{Code: 400, ErrorCode: codeWrongLastSeq}, false},
		{ErrConflict, false},
		{errors.New("disk on fire"), false},
	} {
		if got := Unavailable(c.err); got != c.want {
			t.Errorf("Unavailable(%v) = %v, want %v", c.err, got, c.want)
		}
	}
	l := &Log{}
	if err := l.translate(jetstream.ErrNoStreamResponse, nil); !errors.Is(err, ErrUnavailable) {
		t.Errorf("translate(no stream response) = %v, want ErrUnavailable", err)
	}
}

func TestOwnerLost(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{fmt.Errorf("chat: append turn.failed: %w", fmt.Errorf("%w: agent %q", ErrNotOwner, "a1")), true},
		{fmt.Errorf("x: %w", fmt.Errorf("%w: agent %q: %v", ErrFenced, "a1", ErrConflict)), true},
		{ErrConflict, false},
		{ErrUnavailable, false},
	} {
		if got := OwnerLost(c.err); got != c.want {
			t.Errorf("OwnerLost(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
