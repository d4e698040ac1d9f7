package fiber

import "github.com/forever-agents/forever/eventlog"

// Carries reports whether e carries a fiber's end (CompleteIn): a record
// of the package that rides in another's event.
func Carries(e eventlog.Event) bool { return e.Completes != "" }

// Records returns the records e stands for: e itself without what it
// carries, then the fiber.completed it carries (CompleteIn); e alone when
// it carries none. The carried record has e's agent, sequence, time and
// writer, and an id of its own derived from e's. Readers apply them with
// EachRecord, which allocates nothing for an event that carries none.
func Records(e eventlog.Event) []eventlog.Event {
	var out []eventlog.Event
	_ = EachRecord(e, func(x eventlog.Event) error {
		out = append(out, x)
		return nil
	})
	return out
}

// EachRecord calls fn with each record e stands for, in order (Records),
// and returns fn's first error. Every reader of fiber ends reads an event
// through it, so that a log written at either record format reads the same
// (agentd's FormatInlineEnds).
func EachRecord(e eventlog.Event, fn func(eventlog.Event) error) error {
	if !Carries(e) {
		return fn(e)
	}
	self := e
	self.Completes = ""
	if err := fn(self); err != nil {
		return err
	}
	data, err := encodePayload(payload{ID: e.Completes})
	if err != nil {
		return nil
	}
	return fn(eventlog.Event{Agent: e.Agent, Type: EventCompleted, ID: e.ID + "/completes", Time: e.Time, Data: data,
		Seq: e.Seq, Subject: e.Subject, Pending: e.Pending, Writer: e.Writer})
}
