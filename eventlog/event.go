package eventlog

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/forever-agents/forever/internal/jsonstr"
)

// Seq is a stream sequence number. Sequences start at 1; 0 means "none".
type Seq uint64

// String formats the sequence in decimal.
func (s Seq) String() string { return strconv.FormatUint(uint64(s), 10) }

// HeaderType is set on every stored event to its type, so that tools can
// filter without decoding the body. The agent is the subject's token.
const HeaderType = "Forever-Type"

// Event is one entry of the log. Agent, Type and Data are set by the writer;
// ID and Time are filled in by Append when empty. Seq and Subject are set on
// events returned by Read and Follow.
//
// An event with an empty Stream goes to the events stream on subject
// <prefix>.evt.<agent>. An event with a Stream goes to the chunks stream on
// <prefix>.chunk.<agent>.<stream>: the chunks of one chat stream.
type Event struct {
	Agent  string          `json:"agent"`
	Stream string          `json:"stream,omitempty"`
	Type   string          `json:"type"`
	ID     string          `json:"id"`
	Time   time.Time       `json:"time"`
	Data   json.RawMessage `json:"data,omitempty"`
	// Completes, when set, is the id of a run (a fiber) this event also
	// ends as completed: one record where the run's end was a record of
	// its own after it. The fiber package writes it (Fiber.CompleteIn) and
	// tells its readers (fiber.Records); a reader that does not know it
	// sees the event alone, so it is written only at a record format every
	// reader of the log knows (agentd's FormatInlineEnds).
	Completes string `json:"completes,omitempty"`

	// Set on read.
	Seq     Seq    `json:"-"`
	Subject string `json:"-"`
	// Pending is the number of matching events stored after this one when it
	// was delivered (JetStream's num_pending). Set by Follow and Read.
	Pending uint64 `json:"-"`
	// Writer is the token the event was appended under (Config.Owner),
	// zero for events appended without one. Set on read.
	Writer Token `json:"-"`
}

// Decode unmarshals the event's Data into v. A failure is a *CorruptError.
func (e Event) Decode(v any) error {
	if err := json.Unmarshal(e.Data, v); err != nil {
		return &CorruptError{What: "event data of " + e.Type, Seq: e.Seq, Subject: e.Subject, Err: err}
	}
	return nil
}

// NewEvent builds an event whose Data is v encoded as JSON.
func NewEvent(agent, typ string, v any) (Event, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return Event{}, fmt.Errorf("%w: encode %s data: %w", ErrInvalid, typ, err)
	}
	return Event{Agent: agent, Type: typ, Data: data}, nil
}

// ValidToken reports whether s can be used as one token of a NATS subject:
// non-empty, at most 256 bytes, no '.', '*', '>' and no whitespace or control
// characters, valid UTF-8.
func ValidToken(s string) bool {
	if s == "" || len(s) > 256 || !utf8.ValidString(s) {
		return false
	}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '.' || c == '*' || c == '>':
			return false
		case c <= ' ' || c == 0x7f:
			return false
		}
	}
	return true
}

// validType reports whether s is a usable event type: dot-separated valid
// tokens, such as "fiber.started".
func validType(s string) bool {
	if s == "" || len(s) > 256 {
		return false
	}
	start := 0
	for i := 0; i <= len(s); i++ {
		if i == len(s) || s[i] == '.' {
			if !ValidToken(s[start:i]) {
				return false
			}
			start = i + 1
		}
	}
	return true
}

// validate checks what the writer set.
func (e *Event) validate() error {
	if !ValidToken(e.Agent) {
		return invalidf("agent id %q is not a valid subject token (no '.', '*', '>', spaces; 1 to 256 bytes)", e.Agent)
	}
	if e.Stream != "" && !ValidToken(e.Stream) {
		return invalidf("stream id %q is not a valid subject token (no '.', '*', '>', spaces; 1 to 256 bytes)", e.Stream)
	}
	if !validType(e.Type) {
		return invalidf("event type %q is not valid: want dot-separated tokens such as \"fiber.started\"", e.Type)
	}
	if len(e.Data) > 0 && !json.Valid(e.Data) {
		return invalidf("event %s data is not valid JSON", e.Type)
	}
	return nil
}

// encode returns the message body of e: the same JSON json.Marshal would
// produce, built by hand so the data, already checked by validate, is not
// scanned a second time (appends are on the hot path).
func (e *Event) encode() ([]byte, error) {
	b := make([]byte, 0, 96+len(e.Agent)+len(e.Stream)+len(e.Type)+len(e.ID)+len(e.Completes)+len(e.Data))
	b = append(b, `{"agent":`...)
	b = jsonstr.Append(b, e.Agent)
	if e.Stream != "" {
		b = append(b, `,"stream":`...)
		b = jsonstr.Append(b, e.Stream)
	}
	b = append(b, `,"type":`...)
	b = jsonstr.Append(b, e.Type)
	b = append(b, `,"id":`...)
	b = jsonstr.Append(b, e.ID)
	b = append(b, `,"time":"`...)
	b = e.Time.AppendFormat(b, time.RFC3339Nano)
	b = append(b, '"')
	if e.Completes != "" {
		b = append(b, `,"completes":`...)
		b = jsonstr.Append(b, e.Completes)
	}
	if len(e.Data) > 0 {
		b = append(b, `,"data":`...)
		b = append(b, e.Data...)
	}
	return append(b, '}'), nil
}

// dataSize is the size of data's part of a body encode builds: the body of
// an event with data d is dataSize(d) bytes longer than without it.
func dataSize(d []byte) int {
	if len(d) == 0 {
		return 0
	}
	return len(`,"data":`) + len(d)
}

// decodeMsg turns a stored message into an Event. A body that is not a valid
// envelope is a *CorruptError naming the sequence and subject.
func decodeMsg(seq Seq, subject string, body []byte) (Event, error) {
	var e Event
	if !fastDecode(body, &e) {
		e = Event{}
		if err := json.Unmarshal(body, &e); err != nil {
			return Event{}, &CorruptError{What: "event", Seq: seq, Subject: subject, Err: err}
		}
	}
	// Either way: the fast path took an envelope with an empty agent
	// (FuzzDecodeMsg found it).
	if e.Type == "" || e.Agent == "" {
		return Event{}, &CorruptError{What: "event", Seq: seq, Subject: subject, Err: fmt.Errorf("envelope without type or agent")}
	}
	e.Seq, e.Subject = seq, subject
	return e, nil
}

// fastDecode decodes the envelope exactly as encode writes it (fixed key
// order) without reflection; it reports false for anything else, which
// decodeMsg then hands to encoding/json. Data is
// checked with json.Valid, so a damaged body never passes as an event.
func fastDecode(body []byte, e *Event) bool {
	b, ok := jsonstr.Cut(body, `{"agent":`)
	if !ok {
		return false
	}
	if e.Agent, b, ok = jsonstr.Read(b); !ok {
		return false
	}
	if rest, ok := jsonstr.Cut(b, `,"stream":`); ok {
		if e.Stream, b, ok = jsonstr.Read(rest); !ok {
			return false
		}
	}
	if b, ok = jsonstr.Cut(b, `,"type":`); !ok {
		return false
	}
	if e.Type, b, ok = jsonstr.Read(b); !ok {
		return false
	}
	if b, ok = jsonstr.Cut(b, `,"id":`); !ok {
		return false
	}
	if e.ID, b, ok = jsonstr.Read(b); !ok {
		return false
	}
	if b, ok = jsonstr.Cut(b, `,"time":`); !ok {
		return false
	}
	var ts string
	if ts, b, ok = jsonstr.Read(b); !ok {
		return false
	}
	t, err := time.Parse(time.RFC3339Nano, ts)
	if err != nil {
		return false
	}
	e.Time = t
	if rest, ok := jsonstr.Cut(b, `,"completes":`); ok {
		if e.Completes, b, ok = jsonstr.Read(rest); !ok {
			return false
		}
	}
	if rest, ok := jsonstr.Cut(b, `,"data":`); ok {
		if len(rest) < 2 || rest[len(rest)-1] != '}' {
			return false
		}
		data := rest[:len(rest)-1]
		// encoding/json leaves whitespace around a value out of a
		// RawMessage; encode never writes any, so leave such bodies to it.
		if isSpace(data[0]) || isSpace(data[len(data)-1]) || !json.Valid(data) {
			return false
		}
		e.Data = json.RawMessage(data)
		return true
	}
	return len(b) == 1 && b[0] == '}'
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }
