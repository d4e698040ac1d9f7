package eventlog

import (
	"encoding/json"
	"errors"
	"testing"
	"time"
	"unicode/utf8"
)

func TestValidToken(t *testing.T) {
	tests := []struct {
		in   string
		want bool
	}{
		{"a1", true}, {"agent-7_x:y@z", true}, {"", false}, {"a.b", false},
		{"a*", false}, {">", false}, {"a b", false}, {"a\tb", false}, {"a\x00", false},
	}
	for _, tt := range tests {
		if got := ValidToken(tt.in); got != tt.want {
			t.Errorf("ValidToken(%q) = %v, want %v", tt.in, got, tt.want)
		}
	}
}

// FuzzDecodeMsg: any stored body either decodes to an event with its
// sequence and subject, or fails as a *CorruptError naming them; never panics.
func FuzzDecodeMsg(f *testing.F) {
	f.Add([]byte(`{"agent":"a","type":"t","id":"x","time":"2026-01-01T00:00:00Z","data":1}`))
	f.Add([]byte(`{not json`))
	f.Add([]byte(`{"agent":"","type":"t"}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		e, err := decodeMsg(7, "forever.evt.a", body)
		if err != nil {
			var ce *CorruptError
			if !errors.As(err, &ce) || !errors.Is(err, ErrCorrupt) || ce.Seq != 7 || ce.Subject != "forever.evt.a" {
				t.Fatalf("err = %#v", err)
			}
			return
		}
		if e.Seq != 7 || e.Agent == "" || e.Type == "" {
			t.Fatalf("decoded %+v", e)
		}
	})
}

// FuzzEncode: the hand-built envelope decodes back to the event.
func FuzzEncode(f *testing.F) {
	f.Add("a1", "", "fiber.started", "id-1", "", []byte(`{"x":1}`))
	f.Add("a\"b\\c", "s/1", "t", "é", "", []byte(`"str"`))
	f.Add("a1", "", "turn.completed", "id-2", "f\"1", []byte(`{}`))
	f.Fuzz(func(t *testing.T, agent, stream, typ, id, completes string, data []byte) {
		e := Event{Agent: agent, Stream: stream, Type: typ, ID: id, Completes: completes, Data: data}
		if e.validate() != nil {
			return
		}
		body, err := e.encode()
		if err != nil {
			t.Fatal(err)
		}
		got, err := decodeMsg(1, "s", body)
		if err != nil {
			t.Fatalf("decode %s: %v", body, err)
		}
		if got.Agent != agent || got.Stream != stream || got.Type != typ || !json.Valid(body) ||
			(utf8.ValidString(e.Completes) && got.Completes != e.Completes) {
			t.Fatalf("round trip %+v from %s", got, body)
		}
	})
}

// FuzzFastDecode: the fast path agrees with encoding/json on every body it
// accepts.
func FuzzFastDecode(f *testing.F) {
	e := Event{Agent: "a1", Stream: "s1", Type: "chunk", ID: "s1/0", Time: time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC), Data: json.RawMessage(`{"type":"text-delta","delta":"hi"}`)}
	body, _ := e.encode()
	f.Add(body)
	e.Stream, e.Data = "", nil
	body, _ = e.encode()
	f.Add(body)
	e.Type, e.Completes, e.Data = "turn.completed", "fiber-1", json.RawMessage(`{"requestId":"r"}`)
	body, _ = e.encode()
	f.Add(body)
	f.Add([]byte(`{"agent":"a","type":"t","id":"x","time":"2026-01-01T00:00:00Z","data":{}} `))
	f.Fuzz(func(t *testing.T, body []byte) {
		var fast Event
		if !fastDecode(body, &fast) {
			return
		}
		var slow Event
		if err := json.Unmarshal(body, &slow); err != nil {
			t.Fatalf("fast path accepted %q, encoding/json says %v", body, err)
		}
		if fast.Agent != slow.Agent || fast.Stream != slow.Stream || fast.Type != slow.Type || fast.ID != slow.ID || fast.Completes != slow.Completes ||
			!fast.Time.Equal(slow.Time) || string(fast.Data) != string(slow.Data) {
			t.Fatalf("fast %+v != slow %+v for %q", fast, slow, body)
		}
	})
}
