package audit_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/forever-agents/forever/agentd/audit"
	"github.com/forever-agents/forever/eventlog/eventlogtest"
)

func openLog(t *testing.T) (*audit.Log, jetstream.JetStream) {
	t.Helper()
	s := eventlogtest.RunServer(t, eventlogtest.ServerOptions{})
	js, err := jetstream.New(eventlogtest.Connect(t, s))
	if err != nil {
		t.Fatal(err)
	}
	l, err := audit.Open(t.Context(), audit.Config{JS: js, MaxBytes: 1 << 20, Node: "n1", Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return l, js
}

// tail returns the records Tail prints, waiting until there are want.
func tail(t *testing.T, js jetstream.JetStream, tenant string, n, want int) []audit.Record {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		var got []audit.Record
		err := audit.Tail(t.Context(), js, tenant, n, false, func(r audit.Record) error { got = append(got, r); return nil })
		if err != nil {
			t.Fatal(err)
		}
		if len(got) >= want || time.Now().After(deadline) {
			return got
		}
	}
}

// TestAuditRecordsAndTail: records reach the stream with their node and
// time; Tail returns the last n, of one tenant or all; the stream is
// bounded by age and size.
func TestAuditRecordsAndTail(t *testing.T) {
	l, js := openLog(t)
	for i := range 5 {
		l.Record(audit.Record{Tenant: "acme", Cred: "ci", Role: "writer", Action: "chat", Agent: fmt.Sprint("a", i), Outcome: audit.OK})
	}
	l.Record(audit.Record{Cred: "admin", Action: "tenant.create", Detail: "beta", Outcome: audit.OK})
	all := tail(t, js, "", 0, 6)
	if len(all) != 6 || all[0].Agent != "a0" || all[5].Action != "tenant.create" || all[0].Node != "n1" || all[0].Time.IsZero() {
		t.Fatalf("all records: %+v", all)
	}
	last := tail(t, js, "acme", 2, 2)
	if len(last) != 2 || last[0].Agent != "a3" || last[1].Agent != "a4" {
		t.Fatalf("last 2 of acme: %+v", last)
	}
	st, _ := js.Stream(t.Context(), audit.Stream)
	info, _ := st.Info(t.Context())
	if info.Config.MaxAge != audit.DefaultMaxAge || info.Config.MaxBytes != 1<<20 || info.Config.Discard != jetstream.DiscardOld {
		t.Fatalf("stream bounds: %+v", info.Config)
	}
}

// TestAuditRefusalsBounded: a flood of refusals is recorded at a bounded
// rate, the next record saying how many were left out.
func TestAuditRefusalsBounded(t *testing.T) {
	l, js := openLog(t)
	for range 5000 {
		l.Refused(audit.Record{Action: "auth.refused", Detail: "invalid token", From: "10.0.0.1:1234"})
	}
	time.Sleep(1100 * time.Millisecond) // the refusal rate refills
	l.Refused(audit.Record{Action: "auth.refused", Detail: "invalid token"})
	got := tail(t, js, "", 0, audit.RefusalBurst+1)
	if len(got) > audit.RefusalBurst+2*audit.RefusalRate+1 {
		t.Fatalf("%d refusals recorded of 5001", len(got))
	}
	if s := got[len(got)-1].Suppressed; s < 5000-audit.RefusalBurst-2*audit.RefusalRate {
		t.Fatalf("the record after the flood counts %d suppressed", s)
	}
}
