package chunk

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/forever-agents/forever/eventlog"
)

// TestStreamInfoJSONEqualsMarshal: encodeInfo writes the bytes json.Marshal
// writes, for stream rows of every shape, so the streams view's rows are
// the same as before they were built by hand.
func TestStreamInfoJSONEqualsMarshal(t *testing.T) {
	strs := []string{"", "a1", "stream-7", StatusStreaming, StatusError, "a<b>&c", "quote\"back\\slash", "tab\there", "é ü", "\u2028", "\x00", string([]byte{0xff})}
	times := []time.Time{{}, time.Date(2026, 11, 30, 10, 0, 0, 123456789, time.UTC), time.Date(2026, 11, 30, 10, 0, 0, 0, time.FixedZone("x", -7200)), time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC)}
	seqs := []eventlog.Seq{0, 1, 1 << 63, ^eventlog.Seq(0)}
	ints := []int{0, 7, -1, 1 << 40}
	rng := rand.New(rand.NewPCG(3, 4))
	pick := func(n int) int { return rng.IntN(n) }
	for i := range 5000 {
		s := StreamInfo{
			Agent: strs[pick(len(strs))], Stream: strs[pick(len(strs))], RequestID: strs[pick(len(strs))], MessageID: strs[pick(len(strs))],
			Status: strs[pick(len(strs))], Error: strs[pick(len(strs))], FirstSeq: seqs[pick(len(seqs))], LastSeq: seqs[pick(len(seqs))],
			Chunks: ints[pick(len(ints))], StartedAt: times[pick(len(times))], UpdatedAt: times[pick(len(times))],
			Expired: pick(2) == 0, ExpiredAt: times[pick(len(times))],
		}
		want, wantErr := json.Marshal(s)
		got, err := encodeInfo(s)
		if (err != nil) != (wantErr != nil) || !bytes.Equal(got, want) {
			t.Fatalf("row %d %+v:\n got %s (%v)\nwant %s (%v)", i, s, got, err, want, wantErr)
		}
	}
}

// checkUnpack fails t unless fastUnpack declines data or reads what
// json.Unmarshal does, and reports whether it read it.
func checkUnpack(t *testing.T, data []byte) bool {
	t.Helper()
	i, cs, ok := fastUnpack(data)
	if !ok {
		return false
	}
	var want packed
	if err := json.Unmarshal(data, &want); err != nil || want.Index != i || want.Index < 0 || len(want.Chunks) == 0 || !reflect.DeepEqual(cs, want.Chunks) {
		t.Fatalf("fastUnpack(%s) = %d %q; json.Unmarshal: %d %q (%v)", data, i, cs, want.Index, want.Chunks, err)
	}
	return true
}

// TestFastUnpack: the records encodePacked writes are read without
// reflection, as json.Unmarshal reads them.
func TestFastUnpack(t *testing.T) {
	bodies := [][]byte{[]byte(`{"type":"text-delta","id":"t","delta":"a ]}, \"b\""}`), []byte(`{"type":"finish"}`), []byte(`{"type":"tool-input-available","input":{"a":[1,{"b":"]"}]}}`)}
	for first := range 3 {
		for n := 1; n <= len(bodies); n++ {
			if data := encodePacked(first*1000, bodies[:n]); !checkUnpack(t, data) {
				t.Fatalf("fastUnpack declined %s", data)
			}
		}
	}
}

// FuzzFastUnpack: on any input, fastUnpack declines or reads what
// json.Unmarshal reads.
func FuzzFastUnpack(f *testing.F) {
	for _, s := range []string{`{"i":0,"c":[{"type":"start"}]}`, `{"i":12,"c":[{},{"a":"]}"}]}`, `{"i":-1,"c":[{}]}`, `{"i":01,"c":[{}]}`,
		`{"i":1,"c":[]}`, `{"i":1,"c":[null]}`, `{"i":1,"c":[{}],"i":2}`, `{"i":1,"c":[{},]}`, `{"i":1e3,"c":[{}]}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) { checkUnpack(t, data) })
}
