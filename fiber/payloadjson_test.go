package fiber

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"
)

// randomPayload returns a payload with each field set or not, from values
// that encodePayload copies as they are and values it leaves to
// json.Marshal.
func randomPayload(rng *rand.Rand) payload {
	strs := []string{"", "f1", "op-7", "a<b>&c", "quote\"back\\slash", "tab\there", "é ü", "\u2028", "\x00"}
	raws := []json.RawMessage{nil, json.RawMessage(`null`), json.RawMessage(`{"streamId":"s1","chunkIndex":12,"steps":[{"in":1}]}`),
		json.RawMessage(`{ "a" : [1, 2] }`), json.RawMessage(`"<b>"`), json.RawMessage(`"\u00e9\n"`), json.RawMessage(`"x,}]"`),
		json.RawMessage(`[1,2.5e3,-0,true,false,null,{}]`), json.RawMessage(`{"output":"a b"}`), json.RawMessage(`{"s":"\"}\\"}`), json.RawMessage(`7`)}
	pick := func(n int) int { return rng.IntN(n) }
	s := func() string { return strs[pick(len(strs))] }
	p := payload{ID: s(), Name: s(), Snapshot: raws[pick(len(raws))], Result: raws[pick(len(raws))], Error: s(), Attempt: []int{0, 1, -2, 1 << 40}[pick(4)],
		Reason: s(), Fiber: s(), OpID: s(), Key: s(), NextOpID: s(), NextKey: s(), TraceParent: s(), Version: s(), Restart: pick(2) == 0}
	if pick(2) == 0 {
		t := []time.Time{time.Date(2026, 11, 30, 10, 0, 0, 123456789, time.UTC), time.Date(2026, 11, 30, 10, 0, 0, 0, time.FixedZone("x", 3600)), time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)}[pick(3)]
		p.CreatedAt = &t
	}
	if pick(2) == 0 {
		n := []int{0, 3, -1}[pick(3)]
		p.Attempts = &n
	}
	return p
}

// TestPayloadJSONEqualsMarshal: encodePayload writes the bytes json.Marshal
// writes (and fails where it fails), and decodePayload, where it decodes,
// decodes what json.Unmarshal decodes, so the package's events and the runs
// view's rows are the same as before they were built by hand.
func TestPayloadJSONEqualsMarshal(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	fast := 0
	for i := range 5000 {
		p := randomPayload(rng)
		want, wantErr := json.Marshal(p)
		got, err := encodePayload(p)
		if (err != nil) != (wantErr != nil) || !bytes.Equal(got, want) {
			t.Fatalf("payload %d %+v:\n got %s (%v)\nwant %s (%v)", i, p, got, err, want, wantErr)
		}
		if err != nil {
			continue
		}
		if checkDecode(t, want) {
			fast++
		}
	}
	if fast < 1000 {
		t.Fatalf("decodePayload read %d of 5000 encoded payloads, want most of those without a field json.Marshal rewrites", fast)
	}
	bad := payload{Snapshot: json.RawMessage(`{"a":`)}
	if _, err := encodePayload(bad); err == nil {
		t.Fatal("encodePayload of a snapshot that is not JSON: no error")
	}
}

// checkDecode fails t unless decodePayload either declines data or decodes
// what json.Unmarshal does, and reports whether it decoded.
func checkDecode(t *testing.T, data []byte) bool {
	t.Helper()
	var want payload
	wantErr := json.Unmarshal(data, &want)
	var got payload
	if !decodePayload(data, &got) {
		return false
	}
	if wantErr != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("decodePayload(%s):\n got %+v\nwant %+v (%v)", data, got, want, wantErr)
	}
	return true
}

// FuzzPayloadDecode: on any input, decodePayload declines or decodes what
// json.Unmarshal decodes (so it accepts nothing json.Unmarshal refuses).
func FuzzPayloadDecode(f *testing.F) {
	rng := rand.New(rand.NewPCG(7, 8))
	for range 20 {
		data, err := json.Marshal(randomPayload(rng))
		if err == nil {
			f.Add(data)
		}
	}
	for _, s := range []string{`{}`, `{"id":"a","id":"b"}`, `{"ID":"a"}`, `{"attempt":1.0}`, `{"attempt":01}`, `{"attempts":null}`,
		`{"snapshot":null}`, `{"restart":false}`, `{"createdAt":"x"}`, `{"fiber":"f","opId":"o"} `, `{"key":"k","id":"i"}`, `[]`, `"s"`, `{"snapshot":{,}}`, `{"result":[1,]}`, `{"id":"a",}`, `{"id":"a"}x`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkDecode(t, data)
	})
}
