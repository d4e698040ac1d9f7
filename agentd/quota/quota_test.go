package quota_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/forever-agents/forever/agentd/quota"
	"github.com/forever-agents/forever/auth"
	"github.com/forever-agents/forever/eventlog/eventlogtest"
)

// TestAdmitCountsThePayload: a write is admitted only when the bytes
// stored plus what it would store fit the quota, so a large message with
// some quota left is refused before it stores anything (it used to be
// admitted and stopped halfway by the server's limit); reads are not
// counted.
func TestAdmitCountsThePayload(t *testing.T) {
	s := eventlogtest.RunServer(t, eventlogtest.ServerOptions{})
	nc := eventlogtest.Connect(t, s)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	st, err := js.CreateStream(t.Context(), jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(t.Context(), "s.a", make([]byte, 400<<10)); err != nil {
		t.Fatal(err)
	}
	info, _ := st.Info(t.Context())
	used := int64(info.State.Bytes)

	qs, err := quota.New(auth.Quota{Bytes: 1 << 20}, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	qs.Bind(js)
	big := 320 << 10 // 400 KiB stored + 2 x 320 KiB > 1 MiB, though 400 + 320 KiB < 1 MiB
	var qe *quota.Error
	if err := qs.Admit(t.Context(), "a1", "chat", big); !errors.As(err, &qe) || qe.Quota != "bytes" || !strings.Contains(err.Error(), "limit") {
		t.Fatalf("a %d-byte chat with %d of %d bytes stored: %v, want a bytes refusal", big, used, 1<<20, err)
	}
	if err := qs.Admit(t.Context(), "a1", "chat", 10<<10); err != nil {
		t.Fatalf("a small chat: %v", err)
	}
	if err := qs.Admit(t.Context(), "a1", "messages", big); err != nil {
		t.Fatalf("a read: %v", err)
	}
	if got, want := (auth.Quota{Bytes: 1 << 20}).StoreLimit(), int64(1<<20+128<<10); got != want {
		t.Fatalf("StoreLimit %d, want %d", got, want)
	}
}
