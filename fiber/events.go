package fiber

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/forever-agents/forever/eventlog"
)

// Event types the package appends to an agent's events subject. Their data
// is JSON; the fields of each are listed next to it. The format is guarded by
// the golden history in testdata/.
const (
	EventStarted     = "fiber.started"   // {id, name, createdAt, snapshot?, opId?, key?, traceparent?, version?}: WithSnapshot, FirstStep; the span the fiber was started under; Config.Version
	EventStashed     = "fiber.stashed"   // {id, snapshot, attempts?, nextOpId?, nextKey?}: attempts 0 for a recovered fiber's first progress, or WithAttempts; the next step's op.started (AnnounceStep)
	EventCompleted   = "fiber.completed" // {id, result?}
	EventFailed      = "fiber.failed"    // {id, error}
	EventRecovered   = "fiber.recovered" // {id, attempt, version?, snapshot?}: under another version, the Runner's and the snapshot its policy set (migrated, or null and restart for a restart)
	EventAbandoned   = "fiber.abandoned" // {id, attempts, reason}
	EventOpStarted   = "op.started"      // {fiber, opId, key}
	EventOpCompleted = "op.completed"    // {fiber, opId, result, snapshot?, attempts?, nextOpId?, nextKey?}: a snapshot (ThenStash) as fiber.stashed; attempts 0 for a recovered fiber's first progress; the next step's op.started (ThenStep)
)

// payload is the data of every event of the package; each type uses the
// subset listed with its constant.
type payload struct {
	ID        string          `json:"id,omitempty"`
	Name      string          `json:"name,omitempty"`
	CreatedAt *time.Time      `json:"createdAt,omitempty"`
	Snapshot  json.RawMessage `json:"snapshot,omitempty"`
	Result    json.RawMessage `json:"result,omitempty"`
	Error     string          `json:"error,omitempty"`
	Attempt   int             `json:"attempt,omitempty"`
	Attempts  *int            `json:"attempts,omitempty"`
	Reason    string          `json:"reason,omitempty"`
	Fiber     string          `json:"fiber,omitempty"`
	OpID      string          `json:"opId,omitempty"`
	Key       string          `json:"key,omitempty"`
	NextOpID  string          `json:"nextOpId,omitempty"`
	NextKey   string          `json:"nextKey,omitempty"`
	// TraceParent is the W3C traceparent of the span a fiber was started
	// under (fiber.started, with tracing on): its recovery continues that
	// trace.
	TraceParent string `json:"traceparent,omitempty"`
	// Version is the version of the code that started the fiber
	// (fiber.started) or that recovered it under another version than it
	// last ran under (fiber.recovered; Config.Version).
	Version string `json:"version,omitempty"`
	// Restart marks the fiber.recovered of a VersionRestart: the fiber
	// runs again from its beginning, until it next stashes.
	Restart bool `json:"restart,omitempty"`
}

// event builds one of the package's events for agent.
func event(agent, typ string, p payload) (eventlog.Event, error) {
	data, err := encodePayload(p)
	if err != nil {
		return eventlog.Event{}, fmt.Errorf("%w: encode %s: %w", ErrInvalid, typ, err)
	}
	return eventlog.Event{Agent: agent, Type: typ, Data: data}, nil
}

// isFiberEvent reports whether typ is one the runs projection applies.
func isFiberEvent(typ string) bool {
	switch typ {
	case EventStarted, EventStashed, EventCompleted, EventFailed, EventRecovered, EventAbandoned, EventOpStarted, EventOpCompleted:
		return true
	}
	return false
}

// encodeJSON turns v into a JSON value: json.RawMessage and []byte holding
// valid JSON are taken as they are, anything else is marshalled.
func encodeJSON(what string, v any) (json.RawMessage, error) {
	switch x := v.(type) {
	case json.RawMessage:
		if x == nil {
			return json.RawMessage("null"), nil
		}
		if !json.Valid(x) {
			return nil, invalidf("%s is not valid JSON", what)
		}
		return append(json.RawMessage(nil), x...), nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, invalidf("encode %s: %v", what, err)
	}
	return b, nil
}
