package keepalive

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"reflect"
	"testing"
	"time"

	"github.com/forever-agents/forever/eventlog"
)

var fuzzNow = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// FuzzScheduleEvents: any three schedule events, whatever their data, apply
// without an error (an undecodable one is skipped, never wedging the
// projection) or a panic; every row they leave decodes, round-trips through
// its encoding, has a due key that parses back to it, and computes its next
// occurrence without a panic.
func FuzzScheduleEvents(f *testing.F) {
	set := func(s Schedule) []byte { b, _ := json.Marshal(s); return b }
	out := func(d OutcomeData) []byte { b, _ := json.Marshal(d); return b }
	every := set(Schedule{ID: "s1", Callback: "tick", Kind: KindEvery, Every: time.Minute, NextAt: fuzzNow, CreatedAt: fuzzNow})
	cronS := set(Schedule{ID: "s1", Callback: "c", Kind: KindCron, Cron: "*/2 * * * *", NextAt: fuzzNow, CreatedAt: fuzzNow})
	fired := out(OutcomeData{ID: "s1", Callback: "tick", Due: fuzzNow, Attempts: 1, NextAt: fuzzNow.Add(time.Minute)})
	retry := out(OutcomeData{ID: "s1", Callback: "tick", Due: fuzzNow, Attempts: 2, NextAt: fuzzNow.Add(time.Second), Error: "boom"})
	f.Add(EventSet, every, EventFired, fired, EventRetrying, retry)
	f.Add(EventSet, cronS, EventFailed, retry, EventCancelled, []byte(`{"id":"s1"}`))
	f.Add(EventSet, set(Schedule{ID: "s2", Callback: "once", Kind: KindDelay, Delay: time.Hour, NextAt: fuzzNow.Add(time.Hour)}), EventFired, []byte(`{"id":"s2"}`), EventSet, []byte(`{"id":"s2"`))
	f.Add(EventSet, []byte(`{"id":"s1","kind":"every","every":0,"nextAt":"2026-03-01T12:00:00Z"}`), EventRetrying, []byte(`{"id":"s1","nextAt":"2026-03-01T11:00:00Z"}`), "other.event", []byte(`null`))
	f.Add(EventSet, []byte(`{"id":"s1","kind":"cron","cron":"CRON_TZ=","nextAt":"0001-01-01T00:00:00Z"}`), EventCancelled, []byte(`[]`), EventSet, []byte(`{"nextAt":"9999-12-31T23:59:59Z"}`))
	f.Fuzz(func(t *testing.T, t1 string, d1 []byte, t2 string, d2 []byte, t3 string, d3 []byte) {
		var evs []eventlog.Event
		for i, p := range []struct {
			typ  string
			data []byte
		}{{t1, d1}, {t2, d2}, {t3, d3}} {
			evs = append(evs, eventlog.Event{Agent: "a1", Type: p.typ, Data: p.data, Seq: eventlog.Seq(i + 1), Time: fuzzNow})
		}
		rows, err := eventlog.ApplyInMemory(projection(slog.New(slog.DiscardHandler)), evs)
		if err != nil {
			t.Fatalf("apply: %v", err)
		}
		for _, kv := range rows {
			switch {
			case bytes.HasPrefix(kv.Key, duePrefix):
				if _, agent, _, ok := parseDueKey(kv.Key); !ok || agent != "a1" {
					t.Fatalf("due key %q does not parse", kv.Key)
				}
			case bytes.HasPrefix(kv.Key, []byte("a\x00")):
				s, err := decodeRow(kv.Value)
				if err != nil {
					t.Fatalf("row %q: %v", kv.Value, err)
				}
				enc, err := json.Marshal(s)
				if err != nil {
					t.Fatalf("encode %+v: %v", s, err)
				}
				back, err := decodeRow(enc)
				if err != nil || !reflect.DeepEqual(back, s) {
					t.Fatalf("round trip of %s: %+v, %v; want %+v", enc, back, err, s)
				}
				s.next(fuzzNow, time.UTC) // must not panic
				s.next(fuzzNow.Add(-time.Hour), time.UTC)
			default:
				t.Fatalf("unexpected key %q", kv.Key)
			}
		}
	})
}

// FuzzDueKey: a due key parses back to its time, agent and id; any other
// key is refused or parsed without a panic.
func FuzzDueKey(f *testing.F) {
	f.Add(int64(0), "a1", "s1", []byte("d\x0000000000000000000001\x00a\x00b"))
	f.Add(int64(1772366400000000000), "agent-7", "x", []byte("d\x00-1\x00\x00"))
	f.Fuzz(func(t *testing.T, nanos int64, agent, id string, raw []byte) {
		parseDueKey(raw)
		if !eventlog.ValidToken(agent) || !eventlog.ValidToken(id) {
			return
		}
		at := time.Unix(0, nanos)
		n, a, i, ok := parseDueKey(dueKey(at, agent, id))
		if !ok || n != dueNanos(at) || a != agent || i != id {
			t.Fatalf("parseDueKey(dueKey(%v, %q, %q)) = %d, %q, %q, %v", at, agent, id, n, a, i, ok)
		}
	})
}

// FuzzCronSpec: a cron expression, as an agent may pass it on, is either
// refused with ErrInvalid or gives a schedule whose next occurrence
// computes without a panic.
func FuzzCronSpec(f *testing.F) {
	for _, s := range []string{"*/2 * * * *", "0 0 * * *", "@hourly", "@every 90s", "CRON_TZ=Europe/Paris 0 9 * * 1-5", "TZ=UTC * * * * * *", "CRON_TZ=", "@every -1s", "0 0 30 2 *"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, expr string) {
		s, err := build("a1", Spec{Callback: "c", Cron: expr}, fuzzNow, time.UTC)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("build(%q): %v does not wrap ErrInvalid", expr, err)
			}
			return
		}
		if s.NextAt.IsZero() {
			t.Fatalf("build(%q) gave no next time", expr)
		}
		s.next(s.NextAt, time.UTC)
	})
}
