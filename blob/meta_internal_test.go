package blob

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/forever-agents/forever/eventlog/eventlogtest"
)

func openInternal(t *testing.T) *Store {
	t.Helper()
	s := eventlogtest.RunServer(t, eventlogtest.ServerOptions{})
	js, err := jetstream.New(eventlogtest.Connect(t, s))
	if err != nil {
		t.Fatal(err)
	}
	st, err := Open(t.Context(), js, Config{})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// A Put that touches an object between a sweep's read of its meta message
// and the sweep's delete wins: the delete, expecting the message it read,
// is refused, and the object stays readable.
func TestTouchBeatsDelete(t *testing.T) {
	st := openInternal(t)
	ctx := t.Context()
	data := bytes.Repeat([]byte("x"), 10<<10)
	r, err := st.Put(ctx, data)
	if err != nil {
		t.Fatal(err)
	}
	name, _ := r.Name()
	read, ok, err := st.readMeta(ctx, name) // the sweep reads
	if err != nil || !ok {
		t.Fatalf("meta: %v %v", ok, err)
	}
	if _, err := st.Put(ctx, data); err != nil { // a Put touches
		t.Fatal(err)
	}
	now, _, err := st.readMeta(ctx, name)
	if err != nil || now.seq == read.seq {
		t.Fatalf("the second Put did not touch the object: seq %d then %d, %v", read.seq, now.seq, err)
	}
	deleted := read.info
	deleted.Deleted = true
	if won, err := st.publishMeta(ctx, name, deleted, read.seq); err != nil || won {
		t.Fatalf("a delete expecting the meta before the touch: won %v, %v; want refused", won, err)
	}
	if got, err := st.Get(ctx, r); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("get after the refused delete: %d bytes, %v", len(got), err)
	}
}

// A delete that wins over a touch's read makes the touch lose: the Put
// stores the bytes again, and they read back.
func TestDeleteBeatsTouch(t *testing.T) {
	st := openInternal(t)
	ctx := t.Context()
	data := bytes.Repeat([]byte("y"), 10<<10)
	r, err := st.Put(ctx, data)
	if err != nil {
		t.Fatal(err)
	}
	name, _ := r.Name()
	read, _, err := st.readMeta(ctx, name) // the touch reads
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := st.DeleteUntouched(ctx, r, time.Now().Add(time.Hour)); err != nil || !ok {
		t.Fatalf("delete: %v %v", ok, err)
	}
	if won, err := st.publishMeta(ctx, name, read.info, read.seq); err != nil || won {
		t.Fatalf("a touch expecting the meta before the delete: won %v, %v; want refused", won, err)
	}
	if _, err := st.Get(ctx, r); !errors.Is(err, ErrNotFound) {
		t.Fatalf("get after the delete: %v, want ErrNotFound", err)
	}
	if _, err := st.Put(ctx, data); err != nil {
		t.Fatal(err)
	}
	if got, err := st.Get(ctx, r); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("get after the Put that followed the delete: %d bytes, %v", len(got), err)
	}
}

// DeleteUntouched keeps an object put at or after its cutoff, and one
// that is not there is no error.
func TestDeleteUntouchedKeepsYoung(t *testing.T) {
	st := openInternal(t)
	ctx := t.Context()
	r, err := st.Put(ctx, bytes.Repeat([]byte("z"), 1000))
	if err != nil {
		t.Fatal(err)
	}
	objs, err := st.Objects(ctx)
	if err != nil || len(objs) != 1 {
		t.Fatalf("objects: %+v %v", objs, err)
	}
	if ok, err := st.DeleteUntouched(ctx, r, objs[0].Touched); err != nil || ok {
		t.Fatalf("delete with the cutoff at its put: %v %v, want kept", ok, err)
	}
	if _, err := st.Get(ctx, r); err != nil {
		t.Fatal(err)
	}
	missing := RefOf([]byte("never stored"))
	if ok, err := st.DeleteUntouched(ctx, missing, time.Now().Add(time.Hour)); err != nil || ok {
		t.Fatalf("delete of a missing object: %v %v", ok, err)
	}
}

// FindRefs finds references however deep they are nested, and only
// well-formed ones.
func TestFindRefs(t *testing.T) {
	a, b := RefOf([]byte("a")), RefOf([]byte("b"))
	data := []byte(`{"parts":[{"blobs":{"output":{"digest":"` + a.Digest + `","size":1}}}],"x":{"y":{"outputRef":{"digest":"` +
		b.Digest + `","size":1}}},"bad":{"digest":"sha256:abc","size":3}}`)
	got := FindRefs(data)
	if len(got) != 2 || got[0] != a || got[1] != b {
		t.Fatalf("FindRefs = %+v, want %+v and %+v", got, a, b)
	}
	if FindRefs([]byte(`{"text":"no reference"}`)) != nil {
		t.Fatal("FindRefs found a reference in data without one")
	}
}
