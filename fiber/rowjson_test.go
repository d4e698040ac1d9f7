package fiber

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"strconv"
	"testing"
	"time"
)

// TestRowJSONEqualsMarshal: encodeRow and encodeOp write the bytes
// json.Marshal writes, for rows of every shape and for snapshots and
// results that must be compacted or escaped (the fallback), so the runs
// view's rows are the same as before they were built by hand.
func TestRowJSONEqualsMarshal(t *testing.T) {
	strs := []string{"", "f1", "agent-7", "a<b>&c", "quote\"back\\slash", "tab\there", "é ü", "\u2028\u2029", "\x00\x1f", string([]byte{0xff, 0xfe})}
	raws := []json.RawMessage{nil, {}, json.RawMessage(`null`), json.RawMessage(`{"streamId":"s1","chunkIndex":12,"attemptAt":"2026-11-30T10:00:00.123Z"}`),
		json.RawMessage(`{ "a" : [1, 2] }`), json.RawMessage(`"<b>&</b>"`), json.RawMessage(`"\u00e9\n"`), json.RawMessage(`"é"`),
		json.RawMessage("\"\u2028\""), json.RawMessage(`[1,2.5e3,-0,true,false,null,{}]`), json.RawMessage(`{"x":"a b"}`), json.RawMessage(`"\/"`)}
	times := []time.Time{{}, time.Date(2026, 11, 30, 10, 0, 0, 123456789, time.UTC), time.Date(2026, 11, 30, 10, 0, 0, 0, time.FixedZone("x", 3600)), time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC)}
	ints := []int{0, 1, -3, 1 << 40}
	rng := rand.New(rand.NewPCG(1, 2))
	pick := func(n int) int { return rng.IntN(n) }
	for i := range 5000 {
		r := Row{
			ID: strs[pick(len(strs))], Agent: strs[pick(len(strs))], Name: strs[pick(len(strs))],
			Snapshot: raws[pick(len(raws))], Attempt: ints[pick(len(ints))], Recoveries: ints[pick(len(ints))],
			CreatedAt: times[pick(len(times))], TraceParent: strs[pick(len(strs))], Version: strs[pick(len(strs))],
			LastVersion: strs[pick(len(strs))], Restarted: pick(2) == 0,
		}
		want, wantErr := json.Marshal(r)
		got, err := encodeRow(r)
		if (err != nil) != (wantErr != nil) || !bytes.Equal(got, want) {
			t.Fatalf("row %d %+v:\n got %s (%v)\nwant %s (%v)", i, r, got, err, want, wantErr)
		}
		o := Op{ID: strs[pick(len(strs))], Fiber: strs[pick(len(strs))], Key: strs[pick(len(strs))], Completed: pick(2) == 0, Result: raws[pick(len(raws))]}
		want, wantErr = json.Marshal(o)
		got, err = encodeOp(o)
		if (err != nil) != (wantErr != nil) || !bytes.Equal(got, want) {
			t.Fatalf("op %d %+v:\n got %s (%v)\nwant %s (%v)", i, o, got, err, want, wantErr)
		}
	}
}

// checkRowDecode fails t unless fastRow declines data or decodes what
// json.Unmarshal does, and reports whether it decoded.
func checkRowDecode(t *testing.T, data []byte) bool {
	t.Helper()
	var want Row
	wantErr := json.Unmarshal(data, &want)
	var got Row
	if !fastRow(data, &got) {
		return false
	}
	if wantErr != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("fastRow(%s):\n got %+v\nwant %+v (%v)", data, got, want, wantErr)
	}
	return true
}

// TestRowDecode: fastRow decodes the rows encodeRow writes as
// json.Unmarshal does (and declines the rest).
func TestRowDecode(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	fast := 0
	for range 3000 {
		r := Row{ID: "f" + strconv.Itoa(rng.IntN(100)), Agent: []string{"a1", "a<b>", "é"}[rng.IntN(3)], Name: "turn",
			Snapshot: []json.RawMessage{nil, json.RawMessage(`{"streamId":"s","step":2}`), json.RawMessage(`{"x":"a b"}`)}[rng.IntN(3)],
			Attempt:  rng.IntN(3), Recoveries: rng.IntN(2), CreatedAt: time.Date(2026, 11, 30, 10, 0, 0, rng.IntN(1e9), time.UTC),
			TraceParent: []string{"", "00-ab-cd-01"}[rng.IntN(2)], Version: []string{"", "v2"}[rng.IntN(2)], LastVersion: []string{"", "v3"}[rng.IntN(2)], Restarted: rng.IntN(2) == 0}
		data, err := encodeRow(r)
		if err != nil {
			t.Fatal(err)
		}
		if checkRowDecode(t, data) {
			fast++
		}
	}
	if fast < 1000 {
		t.Fatalf("fastRow read %d of 3000 rows", fast)
	}
}

// FuzzRowDecode: on any input, fastRow declines or decodes what
// json.Unmarshal decodes.
func FuzzRowDecode(f *testing.F) {
	for _, s := range []string{`{"id":"f","agent":"a","name":"n","snapshot":{"a":1},"attempt":0,"createdAt":"2026-11-30T10:00:00Z"}`,
		`{"id":"f","agent":"a","name":"n","attempt":2,"recoveries":1,"createdAt":"0001-01-01T00:00:00Z","restarted":true}`,
		`{"snapshot":null}`, `{"attempt":1e2}`, `{"createdAt":"yesterday"}`, `{"id":"a","id":"b"}`, `{}`, `{"snapshot":[}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) { checkRowDecode(t, data) })
}
