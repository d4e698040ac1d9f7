package eventlog

import (
	"errors"
	"testing"

	"github.com/nats-io/nats.go"
)

// FuzzWriterOf: the writer headers of a stored message give a token, or
// none, never a panic; a token stamped on a message reads back.
func FuzzWriterOf(f *testing.F) {
	f.Add("n1", "7", "n1", uint64(7))
	f.Add("", "1", "node-2", uint64(0))
	f.Add("n1", "-1", "x", uint64(1<<63))
	f.Add("n1", "18446744073709551616", "é", uint64(1))
	f.Fuzz(func(t *testing.T, node, epoch, stampNode string, stampEpoch uint64) {
		tok, ok := WriterOf(nats.Header{HeaderNode: {node}, HeaderEpoch: {epoch}})
		if ok && (tok.Node != node || tok.Node == "") {
			t.Fatalf("WriterOf(%q, %q) = %+v", node, epoch, tok)
		}
		m := nats.NewMsg("s")
		want := Token{Node: stampNode, Epoch: stampEpoch}
		stamp(m, want)
		got, ok := WriterOf(m.Header)
		if ok != (stampNode != "") || (ok && got != want) {
			t.Fatalf("stamp %+v read back as %+v, %v", want, got, ok)
		}
	})
}

// FuzzDecodeUint: a stored projection cursor, version or origin of any
// length decodes or is a *CorruptError; every encoded value decodes back.
func FuzzDecodeUint(f *testing.F) {
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 42}, uint64(42))
	f.Add([]byte{1, 2, 3}, uint64(0))
	f.Add([]byte(nil), ^uint64(0))
	f.Fuzz(func(t *testing.T, raw []byte, v uint64) {
		if _, err := decodeUint("cursor", raw); (err != nil) != (len(raw) != 8) || (err != nil && !errors.Is(err, ErrCorrupt)) {
			t.Fatalf("decodeUint(%x): %v", raw, err)
		}
		if got, err := decodeUint("cursor", encodeUint(v)); err != nil || got != v {
			t.Fatalf("decodeUint(encodeUint(%d)) = %d, %v", v, got, err)
		}
	})
}

// FuzzEventDecode: an event's data decodes into the caller's type or fails
// as a *CorruptError naming the event's sequence.
func FuzzEventDecode(f *testing.F) {
	for _, s := range []string{`{"id":"f1","attempt":2}`, `null`, ``, `{"id":1}`, `[`, `"x"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		e := Event{Agent: "a1", Type: "fiber.recovered", Data: data, Seq: 9, Subject: "forever.evt.a1"}
		var v struct {
			ID      string `json:"id"`
			Attempt int    `json:"attempt"`
		}
		if err := e.Decode(&v); err != nil {
			var ce *CorruptError
			if !errors.As(err, &ce) || !errors.Is(err, ErrCorrupt) || ce.Seq != 9 {
				t.Fatalf("Decode(%q): %#v", data, err)
			}
		}
	})
}
