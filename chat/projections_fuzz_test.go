package chat

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/forever-agents/forever/chat/chunk"
	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/fiber"
)

// The stored chunk event types and the split-part record, as chat/chunk
// writes them (spelled out here: the fuzz targets feed raw stored events).
const (
	evChunk     = chunk.EventChunk
	evChunkPart = chunk.EventPart
)

type chunkPart struct {
	Index int    `json:"i"`
	Part  int    `json:"part"`
	Parts int    `json:"parts"`
	Bytes []byte `json:"b"`
}

var fuzzTime = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// FuzzProjections: any four events, whatever their types and data, apply to
// every projection of the chat read side without an error (which would stop
// the projection for every agent) or a panic, and every JSON row they leave
// is valid JSON.
func FuzzProjections(f *testing.F) {
	enc := func(v any) []byte { b, _ := json.Marshal(v); return b }
	encChunk := func(c chunk.Chunk) []byte { b, _ := c.MarshalJSON(); return b }
	msg := Message{ID: "m1", Role: RoleUser, Parts: []Part{{Type: PartText, Text: "hi"}}, CreatedAt: fuzzTime}
	f.Add(EventMessageAppended, enc(msg),
		EventMessageUpdated, enc(messageUpdated{ID: "m1", Parts: []Part{{Type: PartTool, ToolCallID: "c1", Input: json.RawMessage(`{}`)}}}),
		EventMessagesTruncated, enc(messagesTruncated{AfterID: "m0"}),
		EventMessageAppended, []byte(`{"id":"m2","role":"assistant","parts":null}`))
	f.Add(EventTurnStarted, enc(turnStarted{RequestID: "r1", StreamID: "s1", MessageID: "m1", AssistantMessageID: "m2", Body: json.RawMessage(`{"id":"a1"}`)}),
		fiber.EventStarted, []byte(`{"id":"f1","name":"`+TurnFiberPrefix+`r1"}`),
		fiber.EventFailed, []byte(`{"id":"f1","error":"boom"}`),
		EventTurnCompleted, enc(turnEnded{RequestID: "r1", FinishReason: "stop"}))
	f.Add(EventStateSet, enc(stateSet{Version: 1, Value: json.RawMessage(`{"k":1}`)}),
		EventUsageRecorded, enc(usageRecorded{RequestID: "r1", Input: 3, Output: 4}),
		EventInterruptSet, enc(interruptFlag{Name: InterruptTurn}),
		EventInterruptCleared, enc(interruptFlag{Name: InterruptTurn}))
	f.Add(evChunk, encChunk(chunk.Chunk{Type: chunk.Start, MessageID: "m2", RequestID: "r1"}),
		evChunk, encChunk(chunk.Chunk{Type: chunk.TextDelta, ID: "t0", Delta: "hé"}),
		evChunkPart, enc(chunkPart{Index: 2, Part: 0, Parts: 2, Bytes: []byte(`{"type":"err`)}),
		evChunk, encChunk(chunk.Chunk{Type: chunk.Error, ErrorText: "boom"}))
	f.Add(EventTurnStarted, []byte(`{"requestId":"r1","tools":{"not":"a list"}}`),
		EventTurnFailed, []byte(`{"requestId":"r1","error":7}`),
		EventMessagesTruncated, []byte(`{"afterId":""}`),
		EventStateSet, []byte(`{"version":1}`))
	// A fork (of an agent with no rows here) that appends, truncates
	// below its inherited count and updates.
	f.Add(eventlog.TypeForked, []byte(`{"parent":"a0","messages":3}`),
		EventMessageAppended, enc(msg),
		EventMessagesTruncated, enc(messagesTruncated{AfterID: "m1"}),
		EventMessageUpdated, enc(messageUpdated{ID: "m1", Parts: []Part{{Type: PartText, Text: "edited"}}}))
	projections := []eventlog.Projection{MessagesProjection(), StateProjection(), UsageProjection(),
		InterruptsProjection(), TurnsProjection(), chunk.StreamsProjection()}
	f.Fuzz(func(t *testing.T, t1 string, d1 []byte, t2 string, d2 []byte, t3 string, d3 []byte, t4 string, d4 []byte) {
		for _, p := range projections {
			var evs []eventlog.Event
			for i, ev := range []struct {
				typ  string
				data []byte
			}{{t1, d1}, {t2, d2}, {t3, d3}, {t4, d4}} {
				e := eventlog.Event{Agent: "a1", Type: ev.typ, Data: ev.data, Seq: eventlog.Seq(i + 1), Time: fuzzTime.Add(time.Duration(i) * time.Second)}
				if p.Filter.Chunks {
					e.Stream = "s1"
				}
				evs = append(evs, e)
			}
			rows, err := eventlog.ApplyInMemory(p, evs)
			if err != nil {
				t.Fatalf("projection %s: %v", p.Name, err)
			}
			for _, kv := range rows {
				if jsonRow(p.Name, kv.Key) && !json.Valid(kv.Value) {
					t.Fatalf("projection %s: row %q is not JSON: %q", p.Name, kv.Key, kv.Value)
				}
			}
		}
	})
}

// jsonRow reports whether the row at key of projection name holds JSON
// (see the key layouts in projections.go and streams.go).
func jsonRow(name string, key []byte) bool {
	switch name {
	case MessagesProjectionName:
		return bytes.HasPrefix(key, []byte("m\x00"))
	case StateProjectionName, UsageProjectionName:
		return true
	case TurnsProjectionName:
		return bytes.HasPrefix(key, []byte("t\x00"))
	case chunk.StreamsProjectionName:
		return bytes.HasPrefix(key, []byte("s/"))
	}
	return false
}

// FuzzAssembler: any sequence of stored chunk events is assembled without a
// panic; every chunk it yields round-trips through the stored encoding.
func FuzzAssembler(f *testing.F) {
	enc := func(v any) []byte { b, _ := json.Marshal(v); return b }
	body, _ := chunk.Chunk{Type: chunk.ToolInput, ToolCallID: "c1", ToolName: "search", Input: json.RawMessage(`{"q": "x"}`)}.MarshalJSON()
	f.Add(evChunk, body, evChunkPart, enc(chunkPart{Index: 1, Part: 0, Parts: 2, Bytes: body[:10]}), evChunkPart, enc(chunkPart{Index: 1, Part: 1, Parts: 2, Bytes: body[10:]}))
	f.Add(evChunkPart, enc(chunkPart{Index: 1, Part: 1, Parts: 2, Bytes: body}), evChunkPart, []byte(`{"i":0,"part":0,"parts":-1}`), "other", []byte(`{}`))
	f.Add(evChunk, []byte(`{"type":"text-delta","id":"t0","delta":"h\u00e9"}`), evChunk, []byte(`{"type":`), evChunkPart, []byte(`{"i":0,"part":0,"parts":1,"b":"eyJ0eXBlIjoiZmluaXNoIn0="}`))
	f.Fuzz(func(t *testing.T, t1 string, d1 []byte, t2 string, d2 []byte, t3 string, d3 []byte) {
		var a chunk.Assembler
		for _, ev := range []struct {
			typ  string
			data []byte
		}{{t1, d1}, {t2, d2}, {t3, d3}} {
			c, ok, err := a.Add(ev.typ, ev.data)
			if err != nil || !ok {
				continue
			}
			b, err := c.MarshalJSON()
			if err != nil {
				t.Fatalf("re-encode %+v: %v", c, err)
			}
			var back chunk.Chunk
			err = json.Unmarshal(b, &back)
			if err != nil || !reflect.DeepEqual(back, c) {
				t.Fatalf("round trip of %s: %+v, %v; want %+v", b, back, err, c)
			}
			chunk.SplitPart(ev.typ, ev.data)
		}
	})
}
