package chunk

import (
	"encoding/json"
	"reflect"
	"testing"
)

// FuzzSplitChunk: a chunk split into parts of any size limit is assembled
// back to itself, and each part reports its position through SplitPart.
func FuzzSplitChunk(f *testing.F) {
	f.Add("text-delta", "t0", "a long delta with \"quotes\" and é", []byte(`{"q":"x"}`), 3, uint16(40))
	f.Add("tool-input-available", "", "", []byte(`[1,2,3]`), 0, uint16(0))
	f.Fuzz(func(t *testing.T, typ, id, delta string, input []byte, index int, limit uint16) {
		c := Chunk{Type: typ, ID: id, Delta: delta, Input: json.RawMessage(input)}
		body, err := c.MarshalJSON()
		if err != nil {
			return // invalid raw input: refused at write time
		}
		want, err := decode(body)
		if err != nil {
			t.Fatalf("decode %s: %v", body, err)
		}
		parts, err := split(body, index, 80+int(limit))
		if err != nil {
			t.Fatal(err)
		}
		var a Assembler
		for k, p := range parts {
			typ := EventChunk
			if len(parts) > 1 {
				typ = EventPart
				if n, isSplit := SplitPart(typ, p); !isSplit || n != k {
					t.Fatalf("ChunkPart of part %d = %d, %v", k, n, isSplit)
				}
			}
			got, ok, err := a.Add(typ, p)
			if err != nil {
				t.Fatalf("part %d of %d: %v", k, len(parts), err)
			}
			if ok != (k == len(parts)-1) {
				t.Fatalf("part %d of %d: complete = %v", k, len(parts), ok)
			}
			if ok && !reflect.DeepEqual(got, want) {
				t.Fatalf("assembled %+v, want %+v", got, want)
			}
		}
	})
}
