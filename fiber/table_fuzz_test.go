package fiber

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/forever-agents/forever/eventlog"
)

var fuzzTime = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// FuzzRunsEvents: any four fiber events, whatever their data, apply to the
// runs projection without an error or a panic (one that does not decode
// changes nothing), and every row and op they leave decodes and round-trips
// through its encoding.
func FuzzRunsEvents(f *testing.F) {
	enc := func(p payload) []byte { b, _ := json.Marshal(p); return b }
	two := 2
	created := fuzzTime
	f.Add(EventStarted, enc(payload{ID: "f1", Name: "steps", CreatedAt: &created}),
		EventStashed, enc(payload{ID: "f1", Snapshot: json.RawMessage(`{"done":1}`), Attempts: &two}),
		EventOpStarted, enc(payload{Fiber: "f1", OpID: "op-1", Key: "step-0"}),
		EventOpCompleted, enc(payload{Fiber: "f1", OpID: "op-1", Result: json.RawMessage(`0`)}))
	f.Add(EventStarted, enc(payload{ID: "f1", Name: "chat.turn:r1"}),
		EventRecovered, enc(payload{ID: "f1", Attempt: 3}),
		EventAbandoned, enc(payload{ID: "f1", Attempts: &two, Reason: "exhausted"}),
		EventOpCompleted, enc(payload{Fiber: "f1", OpID: "op-2"}))
	f.Add(EventStarted, []byte(`{"id":"f1","createdAt":"not a time"}`),
		EventStashed, []byte(`{"id":"f1","snapshot":null,"attempts":-1}`),
		EventCompleted, []byte(`{"id":1}`),
		EventFailed, []byte(`{`))
	f.Fuzz(func(t *testing.T, t1 string, d1 []byte, t2 string, d2 []byte, t3 string, d3 []byte, t4 string, d4 []byte) {
		var evs []eventlog.Event
		for i, p := range []struct {
			typ  string
			data []byte
		}{{t1, d1}, {t2, d2}, {t3, d3}, {t4, d4}} {
			evs = append(evs, eventlog.Event{Agent: "a1", Type: p.typ, Data: p.data, Seq: eventlog.Seq(i + 1), Time: fuzzTime})
		}
		rows, err := eventlog.ApplyInMemory(RunsProjection(), evs)
		if err != nil {
			t.Fatalf("apply: %v", err)
		}
		for _, kv := range rows {
			switch {
			case bytes.HasPrefix(kv.Key, []byte("r\x00a1\x00")):
				id := string(kv.Key[len("r\x00a1\x00"):])
				row, err := decodeRow("a1", id, kv.Value)
				if err != nil {
					t.Fatalf("row %s: %v", kv.Value, err)
				}
				b, err := json.Marshal(row)
				if err != nil {
					t.Fatalf("encode %+v: %v", row, err)
				}
				back, err := decodeRow("a1", id, b)
				if err != nil || !reflect.DeepEqual(back, row) {
					t.Fatalf("round trip of %s: %+v, %v; want %+v", b, back, err, row)
				}
			case bytes.HasPrefix(kv.Key, []byte("o\x00a1\x00")):
				var op Op
				if err := json.Unmarshal(kv.Value, &op); err != nil || op.ID == "" {
					t.Fatalf("op %s: %+v, %v", kv.Value, op, err)
				}
			default:
				t.Fatalf("unexpected key %q", kv.Key)
			}
		}
	})
}

// FuzzRecoveredDecode: a stored snapshot handed to a recovery hook decodes,
// or fails with ErrNoSnapshot or an error matching eventlog.ErrCorrupt;
// whatever decodes re-encodes to a snapshot that decodes the same.
func FuzzRecoveredDecode(f *testing.F) {
	for _, s := range []string{`{"done":3,"total":10,"delayMs":500}`, `null`, ``, `{"done":"x"}`, `[1,2]`, `{"done":1e400}`, `{`} {
		f.Add([]byte(s))
	}
	type state struct {
		Done    int            `json:"done"`
		Total   int            `json:"total"`
		DelayMS int            `json:"delayMs"`
		Extra   map[string]any `json:"extra,omitempty"`
	}
	f.Fuzz(func(t *testing.T, snap []byte) {
		rec := Recovered{ID: "f1", Name: "steps", Snapshot: snap, Attempt: 1}
		var st state
		if err := rec.Decode(&st); err != nil {
			if !errors.Is(err, ErrNoSnapshot) && !errors.Is(err, eventlog.ErrCorrupt) {
				t.Fatalf("Decode(%q): %v is neither ErrNoSnapshot nor ErrCorrupt", snap, err)
			}
			return
		}
		b, err := encodeJSON("snapshot", st)
		if err != nil {
			t.Fatal(err)
		}
		var back state
		if err := (Recovered{Snapshot: b}).Decode(&back); err != nil || !reflect.DeepEqual(back, st) {
			t.Fatalf("round trip of %s: %+v, %v; want %+v", b, back, err, st)
		}
	})
}
