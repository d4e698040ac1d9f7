package fiber

import "github.com/forever-agents/forever/eventlog"

// Carries reports whether e carries a fiber's end (CompleteIn): a record
// of the package that rides in another's event.
func Carries(e eventlog.Event) bool { return e.Completes != "" }

// Records returns the records e stands for: e itself without what it
// carries, then the fiber.completed it carries (CompleteIn); e alone when
// it carries none. The carried record has e's agent, sequence, time and
// writer, and an id of its own derived from e's. Every reader of fiber
// ends reads an event through it, so that a log written at either record
// format reads the same (agentd's FormatInlineEnds).
func Records(e eventlog.Event) []eventlog.Event {
	if !Carries(e) {
		return []eventlog.Event{e}
	}
	self := e
	self.Completes = ""
	data, err := encodePayload(payload{ID: e.Completes})
	if err != nil {
		return []eventlog.Event{self}
	}
	end := eventlog.Event{Agent: e.Agent, Type: EventCompleted, ID: e.ID + "/completes", Time: e.Time, Data: data,
		Seq: e.Seq, Subject: e.Subject, Pending: e.Pending, Writer: e.Writer}
	return []eventlog.Event{self, end}
}
