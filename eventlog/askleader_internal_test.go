package eventlog

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
)

// TestAskedAgainBesideTheFirst: an ask no server answers stays in flight
// while another is sent beside it, and the first answer of any is taken
// (a leader elected while the first waits is heard from the next). Asked
// one at a time, the second ask went out only once the first gave up.
func TestAskedAgainBesideTheFirst(t *testing.T) {
	var calls, again atomic.Int32
	var firstDone, sentAfterFirstDone atomic.Bool
	got, err := askUntilAnswered(t.Context(), func() { again.Add(1) }, func(ctx context.Context) (string, error) {
		if calls.Add(1) == 1 {
			<-ctx.Done() // the lost leader's follower: no answer
			firstDone.Store(true)
			return "", ctx.Err()
		}
		// Read when the second ask is sent: once the answer is taken,
		// the first ask is ended too, so firstDone is true afterwards.
		sentAfterFirstDone.Store(firstDone.Load())
		return "answer", nil
	})
	if err != nil || got != "answer" {
		t.Fatalf("got %q, %v; want the second ask's answer", got, err)
	}
	if sentAfterFirstDone.Load() {
		t.Error("the first ask had given up before the second was sent: asks went one at a time")
	}
	if again.Load() < 1 {
		t.Error("the ask sent again was not counted")
	}
}

// TestAskAnsweredWithAnError: an answer that is an error (the stream is
// unavailable, not found) is returned at once, not asked again; the
// caller's end is returned as its own error.
func TestAskAnsweredWithAnError(t *testing.T) {
	refused := errors.New("refused")
	var calls atomic.Int32
	_, err := askUntilAnswered(t.Context(), func() {}, func(context.Context) (int, error) {
		calls.Add(1)
		return 0, refused
	})
	if !errors.Is(err, refused) || calls.Load() != 1 {
		t.Errorf("err %v after %d asks; want the refusal after one", err, calls.Load())
	}

	ctx, cancel := context.WithCancel(t.Context())
	_, err = askUntilAnswered(ctx, cancel, func(ctx context.Context) (int, error) {
		<-ctx.Done()
		return 0, ctx.Err()
	})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("err %v once the caller gave up; want context.Canceled", err)
	}
}
