package eventlog_test

import (
	"errors"
	"testing"
	"time"

	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/eventlog/eventlogtest"
	"github.com/nats-io/nats.go/jetstream"
)

func appendChunk(t *testing.T, lg *eventlog.Log, agent, stream string) (eventlog.Seq, error) {
	t.Helper()
	return lg.Append(t.Context(), eventlog.Event{Agent: agent, Stream: stream, Type: "chunk", Data: []byte(`{"type":"text-delta"}`)})
}

func countChunks(t *testing.T, lg *eventlog.Log, agent, stream string) int {
	t.Helper()
	evs, err := lg.Read(t.Context(), eventlog.Filter{Agent: agent, Stream: stream}, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	return len(evs)
}

// PurgeChunks removes one chat stream's chunks and nothing else.
func TestPurgeChunks(t *testing.T) {
	lg, _ := eventlogtest.Open(t, eventlog.Config{})
	for _, s := range []string{"s1", "s1", "s2"} {
		if _, err := appendChunk(t, lg, "a1", s); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := appendChunk(t, lg, "a2", "s1"); err != nil {
		t.Fatal(err)
	}
	if err := lg.PurgeChunks(t.Context(), "a1", "s1"); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		agent, stream string
		want          int
	}{{"a1", "s1", 0}, {"a1", "s2", 1}, {"a2", "s1", 1}} {
		if got := countChunks(t, lg, c.agent, c.stream); got != c.want {
			t.Errorf("%s/%s: %d chunks, want %d", c.agent, c.stream, got, c.want)
		}
	}
	if err := lg.PurgeChunks(t.Context(), "a1", "s1"); err != nil {
		t.Fatalf("purge again: %v", err)
	}
	if err := lg.PurgeChunks(t.Context(), "a1", "s.*"); !errors.Is(err, eventlog.ErrInvalid) {
		t.Fatalf("bad stream: %v", err)
	}
}

// Under an Owner, a purge needs the agent's token, and an append to the
// purged stream afterwards (retention's marker) is fenced against what the
// log holds after the purge, not against the purged chunks: no conflict,
// no fencing out of the agent.
func TestPurgeChunksFenced(t *testing.T) {
	nd := openNodes(t, 1)[0]
	nd.owner.set("a1", eventlog.Token{Node: "n1", Epoch: 1})
	for range 2 {
		if _, err := appendChunk(t, nd.lg, "a1", "s1"); err != nil {
			t.Fatal(err)
		}
	}
	if err := nd.lg.PurgeChunks(t.Context(), "a2", "s1"); !errors.Is(err, eventlog.ErrNotOwner) {
		t.Fatalf("purge without a token: %v", err)
	}
	if err := nd.lg.PurgeChunks(t.Context(), "a1", "s1"); err != nil {
		t.Fatal(err)
	}
	if _, err := appendChunk(t, nd.lg, "a1", "s1"); err != nil {
		t.Fatalf("append after purge: %v", err)
	}
	if _, err := appendNote(t.Context(), nd.lg, "a1"); err != nil {
		t.Fatalf("agent fenced out after a purge: %v", err)
	}
	select {
	case a := <-nd.fenced:
		t.Fatalf("agent %s reported fenced", a)
	default:
	}
	if got := countChunks(t, nd.lg, "a1", "s1"); got != 1 {
		t.Fatalf("%d chunks, want the one appended after the purge", got)
	}
}

// The chunks stream's own MaxAge is the safety cap, not ChunkMaxAge: the
// Log removes nothing of a stream still streaming at ChunkMaxAge (the
// retention sweep purges ended streams only).
func TestChunksMaxAgeIsSafetyCap(t *testing.T) {
	s := eventlogtest.RunServer(t, eventlogtest.ServerOptions{})
	lg := eventlogtest.OpenOn(t, s, eventlog.Config{ChunkMaxAge: time.Hour})
	if got := lg.ChunkMaxAge(); got != time.Hour {
		t.Fatalf("ChunkMaxAge() = %v", got)
	}
	js, err := jetstream.New(eventlogtest.Connect(t, s))
	if err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(t.Context(), eventlog.DefaultChunksStream)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := st.CachedInfo().Config.MaxAge, eventlog.DefaultChunkSafetyFactor*time.Hour; got != want {
		t.Fatalf("chunks stream MaxAge = %v, want the safety cap %v", got, want)
	}
}
