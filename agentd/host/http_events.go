package host

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/forever-agents/forever/internal/apierror"
	"github.com/nats-io/nats.go/jetstream"
)

// events serves GET /v1/agents/{id}/events[?after=<cursor>]: the agent's
// stored broadcasts and state changes as Server-Sent Events, each with its
// cursor as the event id, so a client that reconnects with Last-Event-ID
// (or ?after=) gets every message after it once.
func (s *httpAgents) events(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodOptions {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	if s.h.deps == nil {
		writeError(w, ErrUnavailable.Wrapf("starting up"))
		return
	}
	agent := r.PathValue("id")
	if _, err := s.h.TypeOf(agent); err != nil {
		writeError(w, err)
		return
	}
	after, resume, err := eventsCursor(r)
	if err != nil {
		writeError(w, err)
		return
	}
	if err := s.h.quotas.Allow(); err != nil {
		writeError(w, err)
		return
	}
	// From now: the cursor is the agent's newest stored message, read
	// before the state, so a change after the read is followed and one
	// before it is in the state (and skipped when it arrives, by its
	// version).
	var first []byte
	version := 0
	if !resume {
		if after, err = s.h.lastAgentEvent(r.Context(), agent); err != nil {
			writeError(w, err)
			return
		}
		var value json.RawMessage
		if s.cfg.State != nil {
			if value, version, err = s.state(r.Context(), agent); err != nil {
				writeError(w, err)
				return
			}
		}
		if len(value) == 0 {
			value = json.RawMessage("null")
		}
		if first, err = json.Marshal(StateMessage{Type: KindState, Version: version, Value: value}); err != nil {
			writeError(w, err)
			return
		}
	}
	// The consumer's handler hands its messages over (it waits while
	// the loop sends), so the loop can also beat, and end with the
	// request or the daemon.
	type event struct {
		seq  uint64
		data []byte
	}
	msgs, done := make(chan event), make(chan struct{})
	cc, err := s.h.followAgentEvents(r.Context(), agent, after, func(m jetstream.Msg) {
		md, err := m.Metadata()
		if err != nil {
			return
		}
		select {
		case msgs <- event{md.Sequence.Stream, m.Data()}:
		case <-done:
		}
	})
	if err != nil {
		writeError(w, err)
		return
	}
	defer func() {
		close(done) // a handler waiting to hand over returns
		cc.Stop()
	}()
	ended := cc.Closed() // stopped, or the stream is gone: the client reconnects
	hd := w.Header()
	hd.Set("Content-Type", "text/event-stream")
	hd.Set("Cache-Control", "no-cache")
	hd.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	send := func(seq uint64, b []byte) bool {
		if _, err := fmt.Fprintf(w, "id: %d\ndata: %s\n\n", seq, b); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	if first != nil && !send(after, first) {
		return
	}
	s.h.watchers.Inc()
	defer s.h.watchers.Dec()

	beat := time.NewTicker(s.cfg.Heartbeat)
	defer beat.Stop()
	for {
		select {
		case <-ended:
			return
		case ev := <-msgs:
			var m struct {
				Type    string `json:"type"`
				Version int    `json:"version"`
			}
			if !resume && json.Unmarshal(ev.data, &m) == nil && m.Type == KindState {
				if m.Version <= version {
					continue // already sent (the state read, or a repeat)
				}
				version = m.Version
			}
			if !send(ev.seq, ev.data) {
				return
			}
		case <-beat.C:
			if _, err := fmt.Fprint(w, ": ping\n\n"); err != nil || rc.Flush() != nil {
				return
			}
		case <-r.Context().Done():
			return
		case <-s.d.Stopping():
			return
		}
	}
}

// eventsCursor reads the cursor to resume after: ?after=, else the
// Last-Event-ID header an EventSource sends when it reconnects. resume is
// false when there is neither: the stream starts from now.
func eventsCursor(r *http.Request) (after uint64, resume bool, err error) {
	v := r.URL.Query().Get("after")
	if v == "" {
		v = r.Header.Get("Last-Event-ID")
	}
	if v == "" {
		return 0, false, nil
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return 0, false, apierror.New(apierror.BadRequest, "the cursor %q is not a stream sequence: resume after the id of the last event read", v)
	}
	return n, true, nil
}

// state reads agent's current state for the first message of its events
// stream: from this node's views (HTTPConfig.State), or, when they do not
// hold the agent (ReadsOnOwner), with the state verb on its owner, for a
// type that has one ({"value", "version"}).
func (s *httpAgents) state(ctx context.Context, agent string) (json.RawMessage, int, error) {
	typ, _ := s.h.TypeOf(agent)
	if !s.h.ReadsOnOwner(agent) || !slices.Contains(s.h.verbs[typ], "state") {
		return s.cfg.State.State(ctx, agent)
	}
	out, err := s.h.Command(ctx, Command{Agent: agent, Verb: "state"})
	if err != nil {
		return nil, 0, err
	}
	st, ok := ReplyAs[struct {
		Value   json.RawMessage `json:"value"`
		Version int             `json:"version"`
	}](out)
	if !ok {
		return nil, 0, fmt.Errorf("agentd: the state of %s from its owner is not {value, version}: %.200s", agent, out)
	}
	return st.Value, st.Version, nil
}
