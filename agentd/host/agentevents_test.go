package host_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/forever-agents/forever/agentd/agentdtest"
)

// sseEvent is one event of an SSE response: its id and its data.
type sseEvent struct{ id, data string }

// sseEvents reads the events of GET url (with Last-Event-ID lastID when
// set) into a channel; cancel ends the request.
func sseEvents(t *testing.T, url, lastID string) (<-chan sseEvent, func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		cancel()
		t.Fatalf("GET %s: %d", url, resp.StatusCode)
	}
	ch := make(chan sseEvent, 100)
	go func() {
		defer close(ch)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		var cur sseEvent
		for sc.Scan() {
			line := sc.Text()
			if id, ok := strings.CutPrefix(line, "id: "); ok {
				cur.id = id
			} else if data, ok := strings.CutPrefix(line, "data: "); ok {
				cur.data = data
			} else if line == "" && cur.data != "" {
				ch <- cur
				cur = sseEvent{}
			}
		}
	}()
	t.Cleanup(cancel)
	return ch, cancel
}

func nextEvent(t *testing.T, ch <-chan sseEvent) sseEvent {
	t.Helper()
	select {
	case e, ok := <-ch:
		if !ok {
			t.Fatal("the stream ended")
		}
		return e
	case <-time.After(10 * time.Second):
		t.Fatal("no event in 10s")
	}
	return sseEvent{}
}

// TestAgentEventsResume: a client of /v1/agents/{id}/events that goes
// away while 20 broadcasts are sent resumes from its cursor with all 20,
// in order, each once, then follows live ones; with Last-Event-ID as an
// EventSource sends it, the same. A bad cursor is 400, and a deleted
// agent's stored events are gone.
func TestAgentEventsResume(t *testing.T) {
	d, _, nc := startAgentsHost(t, agentdtest.Config(t))
	events := "http://" + d.HTTPAddr() + "/v1/agents/r1/events"
	first, cancel := sseEvents(t, events, "")
	state := nextEvent(t, first)
	if state.data != `{"type":"state","version":0,"value":null}` || state.id != "0" {
		t.Fatalf("first event %+v, want the state with cursor 0", state)
	}
	must(t, nc, "r1", "cast", `"before"`, nil)
	seen := nextEvent(t, first)
	if seen.data != `{"type":"broadcast","data":"before"}` {
		t.Fatalf("live event %+v", seen)
	}
	cancel()
	for i := range 20 {
		must(t, nc, "r1", "cast", fmt.Sprint(i), nil)
	}
	check := func(ch <-chan sseEvent, how string) {
		t.Helper()
		last := seen.id
		for i := range 20 {
			e := nextEvent(t, ch)
			if want := fmt.Sprintf(`{"type":"broadcast","data":%d}`, i); e.data != want {
				t.Fatalf("%s: event %d is %+v, want %s", how, i, e, want)
			}
			if e.id <= last && len(e.id) <= len(last) {
				t.Fatalf("%s: cursor %s after %s", how, e.id, last)
			}
			last = e.id
		}
	}
	resumed, _ := sseEvents(t, events+"?after="+seen.id, "")
	check(resumed, "?after")
	byHeader, _ := sseEvents(t, events, seen.id)
	check(byHeader, "Last-Event-ID")
	must(t, nc, "r1", "cast", `"live"`, nil)
	for _, ch := range []<-chan sseEvent{resumed, byHeader} {
		if e := nextEvent(t, ch); e.data != `{"type":"broadcast","data":"live"}` {
			t.Fatalf("after the stored ones: %+v, want the live one", e)
		}
	}
	if code, body := agentdtest.Get(t, events+"?after=nope"); code != 400 || !strings.Contains(body, "cursor") {
		t.Fatalf("bad cursor: %d %s", code, body)
	}

	// The caster's log is empty: delete answers 404, and purges its events.
	nc.Request("forever.cmd.r1.delete", nil, 10*time.Second)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	s, err := js.Stream(t.Context(), "FOREVER_AGENT_EVENTS")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetLastMsgForSubject(t.Context(), "forever.bcast.r1"); !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Fatalf("a deleted agent's events: %v, want none stored", err)
	}
}
