package chatreplay

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/forever-agents/forever/eventlog"
)

// A Recording is what an agent's log holds: its events and the chunks of
// its chat streams, each stream in the order stored. It is the input of
// Run. Write and Load keep one in a file (one stored event per line, the
// format of chat's golden histories), so a conversation recorded once can
// be replayed against every later version of an agent type's code.
type Recording struct {
	// Agent is the agent id the events were stored under.
	Agent string
	// Events are the agent's events (lifecycle, messages, turns), in
	// log order.
	Events []eventlog.Event
	// Chunks are the chunk events of the agent's chat streams, in log
	// order; Event.Stream names the stream.
	Chunks []eventlog.Event
}

// readPage is how many events one Read returns at most.
const readPage = 1000

// Read reads agent's events and chunks from lg, up to the last ones stored
// when it began.
func Read(ctx context.Context, lg *eventlog.Log, agent string) (*Recording, error) {
	if !eventlog.ValidToken(agent) {
		return nil, fmt.Errorf("chatreplay: %q is not a valid agent id", agent)
	}
	rec := &Recording{Agent: agent}
	var err error
	if rec.Events, err = readAll(ctx, lg, eventlog.Filter{Agent: agent}); err != nil {
		return nil, err
	}
	if rec.Chunks, err = readAll(ctx, lg, eventlog.Filter{Agent: agent, Chunks: true}); err != nil {
		return nil, err
	}
	return rec, nil
}

// readAll reads every event matching f stored up to the last sequence when
// it began.
func readAll(ctx context.Context, lg *eventlog.Log, f eventlog.Filter) ([]eventlog.Event, error) {
	last, err := lg.LastSeq(ctx, f)
	if err != nil {
		return nil, fmt.Errorf("chatreplay: last sequence: %w", err)
	}
	var out []eventlog.Event
	var after eventlog.Seq
	for after < last {
		evs, err := lg.Read(ctx, f, after, readPage)
		if err != nil {
			return nil, fmt.Errorf("chatreplay: read after %d: %w", after, err)
		}
		if len(evs) == 0 {
			break
		}
		for _, e := range evs {
			if e.Seq > last {
				return out, nil
			}
			out = append(out, e)
			after = e.Seq
		}
	}
	return out, nil
}

// line is one line of a recording file: an event as stored.
type line struct {
	Agent  string `json:"agent"`
	Stream string `json:"stream,omitempty"`
	ID     string `json:"id"`
	Type   string `json:"type"`
	// Completes: the fiber the event also ends (record format 11).
	Completes string          `json:"completes,omitempty"`
	Data      json.RawMessage `json:"data,omitempty"`
}

// Write writes rec as JSON lines: its events, then its chunks.
func (rec *Recording) Write(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	for _, evs := range [][]eventlog.Event{rec.Events, rec.Chunks} {
		for _, e := range evs {
			if err := enc.Encode(line{Agent: e.Agent, Stream: e.Stream, ID: e.ID, Type: e.Type, Completes: e.Completes, Data: e.Data}); err != nil {
				return err
			}
		}
	}
	return nil
}

// Load reads a recording written by Write.
func Load(r io.Reader) (*Recording, error) {
	rec := &Recording{}
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 64<<20)
	for n := 1; sc.Scan(); n++ {
		var l line
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			return nil, fmt.Errorf("chatreplay: line %d: %w", n, err)
		}
		if rec.Agent == "" {
			rec.Agent = l.Agent
		}
		if l.Agent != rec.Agent {
			return nil, fmt.Errorf("chatreplay: line %d is of agent %q, not %q", n, l.Agent, rec.Agent)
		}
		e := eventlog.Event{Agent: l.Agent, Stream: l.Stream, ID: l.ID, Type: l.Type, Completes: l.Completes, Data: l.Data}
		if e.Stream != "" {
			rec.Chunks = append(rec.Chunks, e)
		} else {
			rec.Events = append(rec.Events, e)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if rec.Agent == "" {
		return nil, errors.New("chatreplay: the recording is empty")
	}
	return rec, nil
}
