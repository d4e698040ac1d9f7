package chunk

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
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
