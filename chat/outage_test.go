package chat_test

import (
	"context"
	"strings"
	"testing"

	"github.com/forever-agents/forever/chat"
	"github.com/forever-agents/forever/chat/chunk"
	"github.com/forever-agents/forever/chat/llm"
	"github.com/forever-agents/forever/eventlog/eventlogtest"
	"github.com/forever-agents/forever/internal/waitfor"
	"github.com/nats-io/nats.go/jetstream"
)

// pauseAfter streams the local model's answer, signalling reached after k
// words and going on only when resume is closed.
func pauseAfter(k int, reached chan<- struct{}, resume <-chan struct{}) script {
	s, _ := pauseAfterText(k, reached, resume)
	return s
}

// pauseAfterText is pauseAfter that also returns the text of the deltas
// yielded before the pause, to read once reached.
func pauseAfterText(k int, reached chan<- struct{}, resume <-chan struct{}) (script, func() string) {
	local := llm.NewLocal(llm.LocalConfig{Rate: -1})
	var before strings.Builder
	return func(ctx context.Context, req llm.Request, yield func(llm.Delta, error) bool) {
		n := 0
		for d, err := range local.Stream(ctx, req) {
			if d.Kind == llm.TextDelta {
				if n == k {
					reached <- struct{}{}
					<-resume
				}
				if n < k {
					before.WriteString(d.Text)
				}
				n++
			}
			if !yield(d, err) || err != nil {
				return
			}
		}
	}, before.String
}

// chunksOutage makes the chunks stream answer no publish, as while its
// leader is elected (no responders), and returns what ends the outage.
func chunksOutage(t *testing.T, e *env) (end func()) {
	t.Helper()
	js, err := jetstream.New(eventlogtest.Connect(t, e.srv))
	if err != nil {
		t.Fatal(err)
	}
	s, err := js.Stream(t.Context(), "FOREVER_CHUNKS")
	if err != nil {
		t.Fatal(err)
	}
	cfg := s.CachedInfo().Config
	subjects := cfg.Subjects
	cfg.Subjects = []string{"outage.nothing"}
	if _, err := js.UpdateStream(t.Context(), cfg); err != nil {
		t.Fatal(err)
	}
	return func() {
		cfg.Subjects = subjects
		if _, err := js.UpdateStream(t.Context(), cfg); err != nil {
			t.Fatal(err)
		}
	}
}

// TestChunksOutageLeavesTurnForRecovery: a turn whose chunk write
// JetStream did not take (the chunks stream electing a leader while the
// events stream works) is left for recovery, unrecorded, and recovery
// continues it into the same stream, which ends. The turn used to be
// recorded failed with no error chunk (that write failed too), so its
// recovery found the turn over and ended the fiber, and the stream never
// ended: every replay client of it waited for good.
func TestChunksOutageLeavesTurnForRecovery(t *testing.T) {
	e := newEnv(t)
	const prompt = "tell me about tides"
	reached, resume := make(chan struct{}, 1), make(chan struct{})
	h := e.host(t, "a1", &fake{scripts: []script{pauseAfter(3, reached, resume)}}, nil)
	turn, err := h.a.Send(t.Context(), chat.SendRequest{Text: prompt})
	if err != nil {
		t.Fatal(err)
	}
	wait(t, reached)
	waitfor.True(t, "the first words to be stored", func() bool { return len(readChunks(t, e.lg, "a1", turn.StreamID)) >= 3 })
	end := chunksOutage(t, e)
	close(resume)
	h.r.Wait()
	if tr := lastTurn(t, e, "a1"); !tr.Active() {
		t.Fatalf("turn recorded during the outage: %+v", tr)
	}
	end()

	recoverHost(t, e, "a1", &fake{scripts: []script{passLocal()}}, nil)
	cs, text := streamOf(t, e.lg, "a1", turn.StreamID)
	if last := cs[len(cs)-1]; last.Type != chunk.Finish || count(cs, chunk.Finish) != 1 {
		t.Fatalf("stream ends with %+v, %d finish chunks", last, count(cs, chunk.Finish))
	}
	if text != answer(prompt) {
		t.Fatalf("stream text %q, want %q", text, answer(prompt))
	}
	if tr := lastTurn(t, e, "a1"); tr.Status != chat.TurnCompleted {
		t.Fatalf("turn = %+v", tr)
	}
	msgs := settled(t, e, "a1")
	if len(msgs) != 2 || msgs[1].ID != turn.MessageID || msgs[1].Text() != answer(prompt) {
		t.Fatalf("messages = %+v", msgs)
	}
}
