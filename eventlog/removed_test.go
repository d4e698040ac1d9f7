package eventlog_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/eventlog/eventlogtest"
	"github.com/forever-agents/forever/internal/waitfor"
)

// TestPurgeIsNotAnotherWriter: a stream purged or deleted under a fenced
// writer is ErrRemoved on the writer's next append, not ErrFenced: nobody
// else wrote, nothing reports a takeover, and the append after it goes on
// from what the log holds. Events and chunks alike; also after the stream
// is deleted and created again.
func TestPurgeIsNotAnotherWriter(t *testing.T) {
	ctx := t.Context()
	s := eventlogtest.RunServer(t, eventlogtest.ServerOptions{})
	owner := &grants{}
	owner.set("x", eventlog.Token{Node: "a", Epoch: 1})
	fenced := make(chan string, 8)
	cfg := eventlog.Config{Owner: owner, OnFenced: func(agent string, _ error) { fenced <- agent }}
	lg := eventlogtest.OpenOn(t, s, cfg)
	js, _ := jetstream.New(eventlogtest.Connect(t, s))
	chunk := func(id string) eventlog.Event {
		return eventlog.Event{Agent: "x", Stream: "s1", Type: "chunk", ID: "s1/" + id, Data: []byte(`{"type":"text-delta"}`)}
	}
	write := func(what string) (evErr, chErr error) {
		t.Helper()
		_, evErr = appendNote(ctx, lg, "x")
		_, chErr = lg.Append(ctx, chunk(what))
		return evErr, chErr
	}
	if e, c := write("0"); e != nil || c != nil {
		t.Fatal(e, c)
	}
	if e, c := write("1"); e != nil || c != nil {
		t.Fatal(e, c)
	}
	for _, tc := range []struct {
		name string
		lose func(stream string) error
	}{
		{"purged", func(stream string) error {
			st, err := js.Stream(ctx, stream)
			if err != nil {
				return err
			}
			return st.Purge(ctx)
		}},
		{"deleted", func(stream string) error {
			info, err := js.Stream(ctx, stream)
			if err != nil {
				return err
			}
			cfg := info.CachedInfo().Config
			if err := js.DeleteStream(ctx, stream); err != nil {
				return err
			}
			_, err = js.CreateStream(ctx, cfg)
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, stream := range []string{eventlog.DefaultEventsStream, eventlog.DefaultChunksStream} {
				if err := tc.lose(stream); err != nil {
					t.Fatal(err)
				}
			}
			e, c := write(tc.name + "-a")
			if !errors.Is(e, eventlog.ErrRemoved) || errors.Is(e, eventlog.ErrFenced) {
				t.Errorf("event append after the stream was %s: %v, want ErrRemoved", tc.name, e)
			}
			if !errors.Is(c, eventlog.ErrRemoved) || errors.Is(c, eventlog.ErrFenced) {
				t.Errorf("chunk append after the stream was %s: %v, want ErrRemoved", tc.name, c)
			}
			if e, c := write(tc.name + "-b"); e != nil || c != nil {
				t.Errorf("appends after ErrRemoved: %v, %v; want them stored", e, c)
			}
			select {
			case a := <-fenced:
				t.Errorf("OnFenced told about %q: nobody else wrote", a)
			default:
			}
		})
	}
}

// TestViewsFollowARestoredStream: the events stream deleted under running
// views and created again (EnsureStream), or purged: after RestartViews the
// views hold exactly what the stream holds now (rebuilt from it), and follow
// the events appended after. Without RestartViews they would wait on a
// consumer of the old stream, or keep the removed events.
func TestViewsFollowARestoredStream(t *testing.T) {
	for _, tc := range []struct {
		name    string
		rebuild bool
		lose    func(t *testing.T, lg *eventlog.Log, js jetstream.JetStream)
	}{
		{"deleted", false, func(t *testing.T, lg *eventlog.Log, js jetstream.JetStream) {
			if err := js.DeleteStream(t.Context(), lg.EventsStream()); err != nil {
				t.Fatal(err)
			}
			if err := lg.EnsureStream(t.Context(), lg.EventsStream()); err != nil {
				t.Fatal(err)
			}
		}},
		{"purged", true, func(t *testing.T, lg *eventlog.Log, js jetstream.JetStream) {
			st, err := js.Stream(t.Context(), lg.EventsStream())
			if err != nil {
				t.Fatal(err)
			}
			if err := st.Purge(t.Context()); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lg, s := eventlogtest.Open(t, eventlog.Config{})
			js, _ := jetstream.New(eventlogtest.Connect(t, s))
			appendN(t, lg, 40, 2)
			p := named("all", 1, eventlog.Filter{})
			f := newFollower(t, lg, p)
			eventlogtest.RunFollower(t, f)
			tc.lose(t, lg, js)
			lg.RestartViews(lg.EventsStream(), tc.rebuild)
			seq, err := lg.Append(t.Context(), eventlog.Event{Agent: "agent1", Type: "tick", Data: []byte(`"after"`)})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
			defer cancel()
			waitfor.NoError(t, func() error {
				evs, err := lg.Read(ctx, p.Filter, 0, 0)
				if err != nil {
					t.Fatal(err)
				}
				if err := f.WaitFor(ctx, seq); err != nil {
					t.Fatal(err)
				}
				if got, want := dump(t, lg, p.Name), fold(evs); !equalMaps(got, want) {
					return fmt.Errorf("view %s = %v, want %v (the stream as it is now)", p.Name, got, want)
				}
				return nil
			})
		})
	}
}

// TestFencedChunksKeepAShortDedupWindow: a fenced Log creates the chunks
// stream with a duplicate window of DefaultFencedChunkDuplicates: its
// chunks carry an expected sequence, so they are never published again
// under one id (retryable refuses them), and a long window only made
// JetStream reload the ids of every recent chunk on restart. The events
// stream keeps its window (message ids dedup retried commands).
func TestFencedChunksKeepAShortDedupWindow(t *testing.T) {
	s := eventlogtest.RunServer(t, eventlogtest.ServerOptions{})
	owner := &grants{}
	eventlogtest.OpenOn(t, s, eventlog.Config{Owner: owner})
	js, _ := jetstream.New(eventlogtest.Connect(t, s))
	for stream, want := range map[string]time.Duration{
		eventlog.DefaultChunksStream: eventlog.DefaultFencedChunkDuplicates,
		eventlog.DefaultEventsStream: eventlog.DefaultDuplicates,
	} {
		st, err := js.Stream(t.Context(), stream)
		if err != nil {
			t.Fatal(err)
		}
		if got := st.CachedInfo().Config.Duplicates; got != want {
			t.Errorf("%s duplicate window %s, want %s", stream, got, want)
		}
	}
}
