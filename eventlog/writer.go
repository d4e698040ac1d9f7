package eventlog

import (
	"context"
	"fmt"
)

// Writer is one agent's handle on the log: it appends to that agent's
// subjects only (its events and its chat streams' chunks) and reads like the
// Log. Agent code gets a Writer, never the Log, so no agent type can write
// another agent's subjects; under a Config.Owner every append is fenced
// (see Config.Owner), whoever makes it. A Writer is safe for concurrent use.
type Writer struct {
	l     *Log
	agent string
}

// Writer returns agent's handle on the log.
func (l *Log) Writer(agent string) *Writer { return &Writer{l: l, agent: agent} }

// Agent returns the agent the Writer writes for.
func (w *Writer) Agent() string { return w.agent }

// Append is Log.Append for the Writer's agent. An empty e.Agent is the
// Writer's agent; another agent is ErrInvalid.
func (w *Writer) Append(ctx context.Context, e Event, opts ...AppendOpt) (Seq, error) {
	if err := w.own(&e); err != nil {
		return 0, err
	}
	return w.l.Append(ctx, e, opts...)
}

// AppendBatch is Log.AppendBatch for the Writer's agent.
func (w *Writer) AppendBatch(ctx context.Context, evs []Event, opts ...AppendOpt) (Seq, error) {
	for i := range evs {
		if err := w.own(&evs[i]); err != nil {
			return 0, err
		}
	}
	return w.l.AppendBatch(ctx, evs, opts...)
}

// AppendAll is Log.AppendAll for the Writer's agent: one chain, about one
// round trip. Without it a caller that looks for AppendAll (a fiber's
// Complete, a chat turn's end) appends the chain one event at a time.
func (w *Writer) AppendAll(ctx context.Context, evs []Event, opts ...AppendOpt) (Seq, error) {
	for i := range evs {
		if err := w.own(&evs[i]); err != nil {
			return 0, err
		}
	}
	return w.l.AppendAll(ctx, evs, opts...)
}

func (w *Writer) own(e *Event) error {
	switch e.Agent {
	case "":
		e.Agent = w.agent
	case w.agent:
	default:
		return fmt.Errorf("%w: the writer of agent %q cannot append for agent %q", ErrInvalid, w.agent, e.Agent)
	}
	return nil
}

// Read is Log.Read.
func (w *Writer) Read(ctx context.Context, f Filter, after Seq, limit int) ([]Event, error) {
	return w.l.Read(ctx, f, after, limit)
}

// LastSeq is Log.LastSeq.
func (w *Writer) LastSeq(ctx context.Context, f Filter) (Seq, error) { return w.l.LastSeq(ctx, f) }

// Last is Log.Last.
func (w *Writer) Last(ctx context.Context, f Filter) (Event, bool, error) { return w.l.Last(ctx, f) }

// MaxPayload is Log.MaxPayload.
func (w *Writer) MaxPayload() int64 { return w.l.MaxPayload() }
