package blob_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/forever-agents/forever/blob"
	"github.com/forever-agents/forever/eventlog/eventlogtest"
)

func open(t *testing.T) (*blob.Store, jetstream.JetStream) {
	t.Helper()
	s := eventlogtest.RunServer(t, eventlogtest.ServerOptions{})
	js, err := jetstream.New(eventlogtest.Connect(t, s))
	if err != nil {
		t.Fatal(err)
	}
	st, err := blob.Open(t.Context(), js, blob.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return st, js
}

func TestPutGet(t *testing.T) {
	st, js := open(t)
	data := bytes.Repeat([]byte("forever "), 300<<10)
	r, err := st.Put(t.Context(), data)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := r, blob.RefOf(data); got != want {
		t.Fatalf("ref = %+v, want %+v", got, want)
	}
	// The same payload again is stored once.
	if _, err := st.Put(t.Context(), data); err != nil {
		t.Fatal(err)
	}
	refs, err := st.List(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if got, want := len(refs), 1; got != want {
		t.Fatalf("objects = %d, want %d", got, want)
	}
	if refs[0] != r {
		t.Fatalf("listed %+v, want %+v", refs[0], r)
	}
	got, err := st.Get(t.Context(), r)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, data) {
		t.Fatal("bytes read differ from bytes stored")
	}
	if err := st.Check(t.Context(), r); err != nil {
		t.Fatal(err)
	}
	// A reference whose object is missing, or whose object holds other
	// bytes under its name, is reported.
	missing := blob.RefOf([]byte("never stored"))
	if err := st.Check(t.Context(), missing); !errors.Is(err, blob.ErrNotFound) {
		t.Fatalf("check missing = %v, want ErrNotFound", err)
	}
	obs, err := js.ObjectStore(t.Context(), blob.Bucket)
	if err != nil {
		t.Fatal(err)
	}
	name, _ := missing.Name()
	if _, err := obs.PutBytes(t.Context(), name, []byte("other bytes")); err != nil {
		t.Fatal(err)
	}
	if err := st.Check(t.Context(), missing); !errors.Is(err, blob.ErrMismatch) {
		t.Fatalf("check tampered = %v, want ErrMismatch", err)
	}
	if err := st.Delete(t.Context(), r); err != nil {
		t.Fatal(err)
	}
	if err := st.Check(t.Context(), r); !errors.Is(err, blob.ErrNotFound) {
		t.Fatalf("check deleted = %v, want ErrNotFound", err)
	}
	if _, err := st.Get(t.Context(), blob.Ref{Digest: "md5:00"}); !errors.Is(err, blob.ErrBadRef) {
		t.Fatalf("get malformed = %v, want ErrBadRef", err)
	}
}
