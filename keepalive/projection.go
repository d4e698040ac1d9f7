package keepalive

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"math"
	"strconv"
	"time"

	"github.com/forever-agents/forever/eventlog"
)

// ProjectionName is the name of the schedules projection.
const ProjectionName = "schedules"

// projectionVersion is the schema version of the rows; bump it when the key
// layout or the row encoding changes, and the view is rebuilt from the log.
const projectionVersion = 1

// Event types appended to an agent's events subject.
const (
	// EventSet creates or replaces a schedule; data is the Schedule.
	EventSet = "schedule.set"
	// EventFired records a successful callback; data is OutcomeData. A zero
	// NextAt removes the schedule, otherwise it fires next at NextAt.
	EventFired = "schedule.fired"
	// EventRetrying records a failed attempt that will be retried at NextAt;
	// data is OutcomeData with Attempts and Error.
	EventRetrying = "schedule.retrying"
	// EventFailed records that the callback failed MaxAttempts times in a
	// row and the occurrence was given up: the error report. Data is
	// OutcomeData; a zero NextAt removes the schedule (one-shot kinds),
	// otherwise the recurring schedule goes on at NextAt.
	EventFailed = "schedule.failed"
	// EventCancelled removes a schedule; data is CancelData.
	EventCancelled = "schedule.cancelled"
)

// OutcomeData is the data of EventFired, EventRetrying and EventFailed. It
// carries every time the projection needs, so Apply never reads a clock.
type OutcomeData struct {
	ID       string    `json:"id"`
	Callback string    `json:"callback"`
	Due      time.Time `json:"due"`             // the NextAt that was attempted
	Attempts int       `json:"attempts"`        // attempts of this occurrence so far, this one included
	NextAt   time.Time `json:"nextAt,omitzero"` // when it fires next; zero removes the schedule
	Error    string    `json:"error,omitempty"` // the callback's error, for retrying and failed
}

// CancelData is the data of EventCancelled.
type CancelData struct {
	ID string `json:"id"`
}

// Row keys. Agent and schedule ids are subject tokens, which cannot contain
// bytes <= ' ', so a NUL separates the parts and a prefix scan of one agent
// never matches another agent whose id extends it.
//
//	a\x00<agent>\x00<id>                     -> Schedule JSON
//	d\x00<due unix nanos, 20 digits>\x00<agent>\x00<id> -> empty
func agentPrefix(agent string) []byte { return []byte("a\x00" + agent + "\x00") }

func rowKey(agent, id string) []byte { return append(agentPrefix(agent), id...) }

var duePrefix = []byte("d\x00")

func dueKey(t time.Time, agent, id string) []byte {
	k := append(bytes.Clone(duePrefix), fmt.Sprintf("%020d", dueNanos(t))...)
	return append(append(append(append(k, 0), agent...), 0), id...)
}

// parseDueKey returns the agent and id of a due key.
func parseDueKey(k []byte) (nanos int64, agent, id string, ok bool) {
	parts := bytes.Split(k, []byte{0})
	if len(parts) != 4 || string(parts[0]) != "d" {
		return 0, "", "", false
	}
	n, err := strconv.ParseInt(string(parts[1]), 10, 64)
	if err != nil {
		return 0, "", "", false
	}
	return n, string(parts[2]), string(parts[3]), true
}

var maxNanoTime = time.Unix(0, math.MaxInt64)

// dueNanos is t in Unix nanoseconds, clamped to [0, MaxInt64].
func dueNanos(t time.Time) int64 {
	switch {
	case t.Before(time.Unix(0, 0)):
		return 0
	case t.After(maxNanoTime):
		return math.MaxInt64
	}
	return t.UnixNano()
}

// projection returns the schedules projection. Apply is deterministic: the
// rows depend on the events only.
func projection(logger *slog.Logger) eventlog.Projection {
	return eventlog.Projection{
		Name:    ProjectionName,
		Version: projectionVersion,
		Filter:  eventlog.Filter{},
		Apply: func(b *eventlog.Batch, e eventlog.Event) error {
			err := apply(b, e)
			var ce *eventlog.CorruptError
			if errors.As(err, &ce) {
				// A schedule event whose data cannot be decoded changes
				// nothing; stopping the projection would stop every agent.
				logger.Error("skipping undecodable schedule event", "seq", e.Seq, logKeyAgent, e.Agent, "type", e.Type, "err", err)
				return nil
			}
			return err
		},
		AgentRows: agentRows,
	}
}

// agentRows yields an agent's schedule rows, each followed by its due key:
// what a snapshot of the agent holds. A row that cannot be decoded is
// yielded alone (its due key is unknown; the row is rewritten by the next
// schedule.set of its id).
func agentRows(r eventlog.Reader, agent string) iter.Seq2[eventlog.KV, error] {
	return func(yield func(eventlog.KV, error) bool) {
		for kv, err := range r.Scan(agentPrefix(agent)) {
			if err != nil {
				yield(eventlog.KV{}, err)
				return
			}
			if !yield(kv, nil) {
				return
			}
			s, err := decodeRow(kv.Value)
			if err != nil {
				continue
			}
			if !yield(eventlog.KV{Key: dueKey(s.NextAt, agent, s.ID), Value: []byte{}}, nil) {
				return
			}
		}
	}
}

func apply(b *eventlog.Batch, e eventlog.Event) error {
	switch e.Type {
	case EventSet:
		var s Schedule
		if err := e.Decode(&s); err != nil {
			return err
		}
		s.Agent = e.Agent
		if err := deleteRow(b, e.Agent, s.ID); err != nil {
			return err
		}
		return putRow(b, s)
	case EventFired, EventRetrying, EventFailed:
		var d OutcomeData
		if err := e.Decode(&d); err != nil {
			return err
		}
		s, ok, err := getRow(b, e.Agent, d.ID)
		if err != nil || !ok {
			return err // a schedule cancelled while it fired: nothing to do
		}
		if err := deleteKeys(b, s); err != nil || d.NextAt.IsZero() {
			return err
		}
		s.NextAt = d.NextAt
		switch e.Type {
		case EventFired:
			s.Attempts, s.LastError = 0, ""
		case EventRetrying:
			s.Attempts, s.LastError = d.Attempts, d.Error
		case EventFailed:
			s.Attempts, s.LastError = 0, d.Error
		}
		return putRow(b, s)
	case EventCancelled:
		var d CancelData
		if err := e.Decode(&d); err != nil {
			return err
		}
		return deleteRow(b, e.Agent, d.ID)
	}
	return nil
}

func getRow(b *eventlog.Batch, agent, id string) (Schedule, bool, error) {
	v, err := b.Get(rowKey(agent, id))
	if errors.Is(err, eventlog.ErrNotFound) {
		return Schedule{}, false, nil
	}
	if err != nil {
		return Schedule{}, false, err
	}
	s, err := decodeRow(v)
	return s, err == nil, err
}

func decodeRow(v []byte) (Schedule, error) {
	var s Schedule
	if err := json.Unmarshal(v, &s); err != nil {
		return Schedule{}, &eventlog.CorruptError{What: "schedule row", Err: err}
	}
	return s, nil
}

func putRow(b *eventlog.Batch, s Schedule) error {
	v, err := json.Marshal(s)
	if err != nil {
		return fmt.Errorf("encode schedule %s: %w", s.ID, err)
	}
	if err := b.Set(rowKey(s.Agent, s.ID), v); err != nil {
		return err
	}
	return b.Set(dueKey(s.NextAt, s.Agent, s.ID), nil)
}

// deleteRow removes a schedule's row and due key, if present.
func deleteRow(b *eventlog.Batch, agent, id string) error {
	old, ok, err := getRow(b, agent, id)
	if err != nil || !ok {
		var ce *eventlog.CorruptError
		if errors.As(err, &ce) { // an unreadable row is replaced
			return b.Delete(rowKey(agent, id))
		}
		return err
	}
	return deleteKeys(b, old)
}

// deleteKeys removes the row and the due key of s, as stored.
func deleteKeys(b *eventlog.Batch, s Schedule) error {
	if err := b.Delete(dueKey(s.NextAt, s.Agent, s.ID)); err != nil {
		return err
	}
	return b.Delete(rowKey(s.Agent, s.ID))
}
