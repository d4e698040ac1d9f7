package chunk_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/forever-agents/forever/chat/chunk"
	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/eventlog/eventlogtest"
)

// retentionEnv is a log with the streams projection running and a batcher.
type retentionEnv struct {
	lg      *eventlog.Log
	b       *eventlog.Batcher
	pr      *eventlog.Projector
	streams *chunk.Streams
}

func newRetentionEnv(t *testing.T) *retentionEnv {
	t.Helper()
	lg, _ := eventlogtest.Open(t, eventlog.Config{})
	pr, err := lg.NewProjector(chunk.StreamsProjection())
	if err != nil {
		t.Fatal(err)
	}
	eventlogtest.RunProjector(t, pr)
	v, err := lg.View(chunk.StreamsProjectionName)
	if err != nil {
		t.Fatal(err)
	}
	return &retentionEnv{lg: lg, b: runBatcher(t, lg), pr: pr, streams: chunk.NewStreams(v)}
}

// write writes chunks to a stream and waits until the view applied them.
func (e *retentionEnv) write(t *testing.T, agent, stream string, cs ...chunk.Chunk) {
	t.Helper()
	w := chunk.NewWriter(e.b, agent, stream, 0, e.lg.MaxPayload())
	for _, c := range cs {
		if err := w.Write(t.Context(), c); err != nil {
			t.Fatal(err)
		}
	}
	seq, err := w.Flush(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if err := e.pr.WaitFor(t.Context(), seq); err != nil {
		t.Fatal(err)
	}
}

// caughtUp waits until the view applied everything on the chunks stream.
func (e *retentionEnv) caughtUp(t *testing.T) {
	t.Helper()
	last, err := e.lg.LastSeq(t.Context(), eventlog.Filter{Chunks: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.pr.WaitFor(t.Context(), last); err != nil {
		t.Fatal(err)
	}
}

func (e *retentionEnv) stored(t *testing.T, agent, stream string) []eventlog.Event {
	t.Helper()
	evs, err := e.lg.Read(t.Context(), eventlog.Filter{Agent: agent, Stream: stream}, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

func (e *retentionEnv) sweeper(t *testing.T, now time.Time, owns func(string) bool) *chunk.Sweeper {
	t.Helper()
	sw, err := chunk.NewSweeper(chunk.SweeperConfig{
		Log: e.lg, Streams: e.streams, MaxAge: time.Hour, Owns: owns,
		Now: func() time.Time { return now },
	})
	if err != nil {
		t.Fatal(err)
	}
	return sw
}

var (
	started  = []chunk.Chunk{{Type: chunk.Start, MessageID: "m1", RequestID: "r1"}, {Type: chunk.StartStep}, {Type: chunk.TextStart, ID: "t1"}, {Type: chunk.TextDelta, ID: "t1", Delta: "hi"}}
	finished = append(append([]chunk.Chunk(nil), started...), chunk.Chunk{Type: chunk.TextEnd, ID: "t1"}, chunk.Chunk{Type: chunk.FinishStep}, chunk.Chunk{Type: chunk.Finish})
)

// Retention never purges a stream still streaming, however old; it purges
// an ended stream once it ended more than MaxAge ago and marks it expired,
// in the view and on the log (a view rebuilt after the purge agrees).
func TestSweepPurgesEndedStreamsOnly(t *testing.T) {
	e := newRetentionEnv(t)
	e.write(t, "a1", "live", started...)
	e.write(t, "a1", "done", finished...)
	e.write(t, "a2", "failed", chunk.Chunk{Type: chunk.Start}, chunk.Chunk{Type: chunk.Error, ErrorText: "boom"})
	before, err := e.streams.Get("a1", "done")
	if err != nil {
		t.Fatal(err)
	}

	// Within MaxAge of their end, nothing goes.
	if n, err := e.sweeper(t, time.Now(), nil).Sweep(t.Context()); n != 0 || err != nil {
		t.Fatalf("early sweep: %d, %v", n, err)
	}
	// Far later: the ended streams go, the streaming one stays whole.
	later := time.Now().Add(100 * time.Hour)
	n, err := e.sweeper(t, later, nil).Sweep(t.Context())
	if n != 2 || err != nil {
		t.Fatalf("sweep: %d, %v; want 2 streams expired", n, err)
	}
	e.caughtUp(t)
	if got := len(e.stored(t, "a1", "live")); got != len(started) {
		t.Fatalf("streaming stream has %d chunks, want %d", got, len(started))
	}
	if info, err := e.streams.Get("a1", "live"); err != nil || info.Expired || info.Done() {
		t.Fatalf("streaming stream = %+v, %v", info, err)
	}
	for _, s := range []struct{ agent, stream, status string }{{"a1", "done", chunk.StatusCompleted}, {"a2", "failed", chunk.StatusError}} {
		evs := e.stored(t, s.agent, s.stream)
		if len(evs) != 1 || evs[0].Type != chunk.EventExpired {
			t.Fatalf("%s/%s stored %+v, want only the expiry marker", s.agent, s.stream, evs)
		}
		var a chunk.Assembler
		if _, _, err := a.Add(evs[0].Type, evs[0].Data); !errors.Is(err, chunk.ErrExpired) {
			t.Fatalf("assembler on the marker: %v", err)
		}
		info, err := e.streams.Get(s.agent, s.stream)
		if err != nil {
			t.Fatal(err)
		}
		if !info.Expired || !info.ExpiredAt.Equal(later.UTC()) || info.Status != s.status {
			t.Fatalf("%s/%s = %+v, want expired at %v with status %s", s.agent, s.stream, info, later, s.status)
		}
	}
	after, _ := e.streams.Get("a1", "done")
	if after.FirstSeq != before.FirstSeq || after.LastSeq != before.LastSeq || after.Chunks != before.Chunks || after.MessageID != "m1" {
		t.Fatalf("metadata changed by the expiry: %+v, was %+v", after, before)
	}

	// A view rebuilt from what the log holds now gets the same row.
	rows, err := eventlog.ApplyInMemory(chunk.StreamsProjection(), e.stored(t, "a1", "done"))
	if err != nil {
		t.Fatal(err)
	}
	var rebuilt chunk.StreamInfo
	var latest string
	for _, kv := range rows {
		switch string(kv.Key) {
		case "s/a1/done":
			if err := json.Unmarshal(kv.Value, &rebuilt); err != nil {
				t.Fatal(err)
			}
		case "l/a1":
			latest = string(kv.Value)
		}
	}
	if !reflect.DeepEqual(rebuilt, after) || latest != "done" {
		t.Fatalf("rebuilt row %+v (latest %q), live row %+v", rebuilt, latest, after)
	}

	// Expired streams leave the candidates: the next sweep has nothing.
	if n, err := e.sweeper(t, later, nil).Sweep(t.Context()); n != 0 || err != nil {
		t.Fatalf("second sweep: %d, %v", n, err)
	}
}

// Only the agent's owner expires its streams.
func TestSweepOwnedOnly(t *testing.T) {
	e := newRetentionEnv(t)
	// Stream ids are unique across agents (chunk ids dedup in one stream).
	e.write(t, "mine", "s1", finished...)
	e.write(t, "theirs", "s2", finished...)
	later := time.Now().Add(100 * time.Hour)
	n, err := e.sweeper(t, later, func(agent string) bool { return agent == "mine" }).Sweep(t.Context())
	if n != 1 || err != nil {
		t.Fatalf("sweep: %d, %v", n, err)
	}
	e.caughtUp(t)
	if got := len(e.stored(t, "theirs", "s2")); got != len(finished) {
		t.Fatalf("another owner's stream has %d chunks, want %d", got, len(finished))
	}
	if info, _ := e.streams.Get("mine", "s1"); !info.Expired {
		t.Fatalf("own stream not expired: %+v", info)
	}
}

// A crash between the purge and the marker leaves a purged stream that
// the view still lists as ended: the next sweep marks it.
func TestSweepAfterPurgeWithoutMarker(t *testing.T) {
	e := newRetentionEnv(t)
	e.write(t, "a1", "s1", finished...)
	if err := e.lg.PurgeChunks(t.Context(), "a1", "s1"); err != nil {
		t.Fatal(err)
	}
	n, err := e.sweeper(t, time.Now().Add(100*time.Hour), nil).Sweep(t.Context())
	if n != 1 || err != nil {
		t.Fatalf("sweep: %d, %v", n, err)
	}
	e.caughtUp(t)
	if info, _ := e.streams.Get("a1", "s1"); !info.Expired {
		t.Fatalf("not marked: %+v", info)
	}
}
