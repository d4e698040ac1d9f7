package chat_test

import (
	"context"
	"testing"

	"github.com/forever-agents/forever/chat/chunk"
	"github.com/forever-agents/forever/eventlog"
)

func runBatcher(t *testing.T, lg *eventlog.Log) *eventlog.Batcher {
	b := lg.NewBatcher(eventlog.BatcherConfig{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return b
}

func readChunks(t *testing.T, lg *eventlog.Log, agent, stream string) []chunk.Chunk {
	t.Helper()
	evs, err := lg.Read(t.Context(), eventlog.Filter{Agent: agent, Stream: stream}, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var a chunk.Assembler
	var out []chunk.Chunk
	for _, e := range evs {
		cs, err := a.Chunks(e.Type, e.Data)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, cs...)
	}
	return out
}
