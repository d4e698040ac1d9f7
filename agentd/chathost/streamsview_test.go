package chathost

import (
	"context"
	"sync"
	"testing"

	"github.com/forever-agents/forever/chat"
	"github.com/forever-agents/forever/chat/chunk"
	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/eventlog/eventlogtest"
)

// lateViews is the node's log, whose views start applying only once the
// streams read asked for the last chunk stored: a view behind the chunks
// a turn just wrote, as it is for a moment after every turn.
type lateViews struct {
	*eventlog.Log
	start func()
}

func (l lateViews) LastSeq(ctx context.Context, f eventlog.Filter) (eventlog.Seq, error) {
	seq, err := l.Log.LastSeq(ctx, f)
	l.start()
	return seq, err
}

// The streams verb reads once this node's streams view applied the agent's
// last chunk stored: a turn's chunks, just written, are listed even when
// the view had not applied them when the read came.
func TestStreamsWaitForTheView(t *testing.T) {
	lg, _ := eventlogtest.Open(t, eventlog.Config{})
	store, prs, err := chat.OpenStore(lg)
	if err != nil {
		t.Fatal(err)
	}
	for _, data := range []string{`{"type":"start","messageId":"m1"}`, `{"type":"finish"}`} {
		if _, err := lg.Append(t.Context(), eventlog.Event{Agent: "a1", Stream: "s1", Type: chunk.EventChunk, Data: []byte(data)}); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() {
		cancel()
		wg.Wait()
	})
	var once sync.Once
	start := func() {
		once.Do(func() {
			for _, pr := range prs {
				wg.Go(func() { _ = pr.Run(ctx) })
			}
		})
	}
	page, err := streamsPage(t.Context(), lateViews{Log: lg, start: start}, store, "a1", StreamsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Streams) != 1 || page.Streams[0].Stream != "s1" || page.Streams[0].Chunks != 2 || page.Streams[0].Status == chunk.StatusStreaming {
		t.Fatalf("streams right after the turn's chunks: %+v", page.Streams)
	}
}

// Views that do not move (never started here) still get an answer, once
// the wait is over: the streams the view holds, none.
func TestStreamsAnswerPastTheWait(t *testing.T) {
	lg, _ := eventlogtest.Open(t, eventlog.Config{})
	store, _, err := chat.OpenStore(lg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lg.Append(t.Context(), eventlog.Event{Agent: "a1", Stream: "s1", Type: chunk.EventChunk, Data: []byte(`{"type":"start"}`)}); err != nil {
		t.Fatal(err)
	}
	page, err := streamsPage(t.Context(), lg, store, "a1", StreamsRequest{})
	if err != nil || page.Streams == nil {
		t.Fatalf("streams of views that do not move: %+v, %v", page, err)
	}
}
