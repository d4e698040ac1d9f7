package replay_test

import (
	"strings"
	"testing"

	"github.com/forever-agents/forever/chat/chunk"
	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/eventlog/eventlogtest"
	"github.com/forever-agents/forever/replay"
)

// BenchmarkFollow replays a stored 2,000-chunk stream per iteration.
func BenchmarkFollow(b *testing.B) {
	const n = 2000
	s := eventlogtest.RunServer(b, eventlogtest.ServerOptions{})
	lg := eventlogtest.OpenOn(b, s, eventlog.Config{})
	bt, _ := runBatcher(b, lg)
	w := chunk.NewWriter(bt, "a", "s", 0, lg.MaxPayload())
	ctx := b.Context()
	for i := range n {
		c := chunk.Chunk{Type: chunk.TextDelta, ID: "t", Delta: strings.Repeat("x", 64)}
		if i == n-1 {
			c = chunk.Chunk{Type: chunk.Finish}
		}
		if err := w.Write(ctx, c); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := w.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	client := replay.NewClient(lg)
	b.ResetTimer()
	for b.Loop() {
		got := 0
		for _, err := range client.Follow(ctx, "a", "s", replay.Cursor{}) {
			if err != nil {
				b.Fatal(err)
			}
			got++
		}
		if got != n {
			b.Fatalf("got %d", got)
		}
	}
	b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "chunks/s")
}
