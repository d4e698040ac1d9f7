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
	"github.com/forever-agents/forever/internal/waitfor"
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
	var got []audit.Record
	waitfor.NoError(t, func() error {
		got = nil
		err := audit.Tail(t.Context(), js, tenant, n, false, func(r audit.Record) error { got = append(got, r); return nil })
		if err != nil {
			t.Fatal(err)
		}
		if len(got) < want {
			return fmt.Errorf("%d records of %q, have %d", want, tenant, len(got))
		}
		return nil
	})
	return got
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
// rate, the records saying how many were left out in between: the
// records and the ones they count left out add up to the flood.
func TestAuditRefusalsBounded(t *testing.T) {
	l, js := openLog(t)
	for range 5000 {
		l.Refused(audit.Record{Action: "auth.refused", Detail: "invalid token", From: "10.0.0.1:1234"})
	}
	time.Sleep(1100 * time.Millisecond)                                                       // not a synchronisation: the refusal rate refills
	l.Refused(audit.Record{Action: "auth.refused", Detail: "the last", From: "10.0.0.1:999"}) // same host
	var got []audit.Record
	waitfor.NoError(t, func() error {
		got = tail(t, js, "", 0, 1)
		if len(got) == 0 || got[len(got)-1].Detail != "the last" {
			return fmt.Errorf("the last refusal to be recorded among %d", len(got))
		}
		return nil
	})
	sum := 0
	for _, r := range got {
		sum += 1 + r.Suppressed
	}
	if len(got) > 2500 {
		t.Fatalf("%d refusals recorded of 5001", len(got))
	}
	if sum != 5001 {
		t.Fatalf("%d records count %d refusals, not 5001", len(got), sum)
	}
	if got[len(got)-1].Suppressed == 0 {
		t.Fatal("the record after the flood counts none suppressed")
	}
}

// TestAuditRefusalsPerTenantAndSource: one tenant's flood from one
// source leaves the refusals of another tenant, and of the same tenant
// from another source, recorded at once, with nothing suppressed.
func TestAuditRefusalsPerTenantAndSource(t *testing.T) {
	l, js := openLog(t)
	for range 5000 {
		l.Refused(audit.Record{Tenant: "acme", Action: "auth.refused", Detail: "flood", From: "10.0.0.1:1234"})
	}
	l.Refused(audit.Record{Tenant: "beta", Action: "auth.refused", Detail: "beta's failed login", From: "10.0.0.1:1235"})
	l.Refused(audit.Record{Tenant: "acme", Action: "auth.refused", Detail: "acme from elsewhere", From: "10.0.0.2:1"})
	l.Refused(audit.Record{Action: "nats.denied", Detail: "the node's", From: "10.0.0.1:1236"})
	for _, c := range []struct{ tenant, detail string }{{"beta", "beta's failed login"}, {"acme", "acme from elsewhere"}, {audit.NodeSubject, "the node's"}} {
		t.Run(c.detail, func(t *testing.T) {
			want := 1
			if c.tenant == "acme" {
				want = audit.RefusalBurst + 1
			}
			var found bool
			for _, r := range tail(t, js, c.tenant, 0, want) {
				if r.Detail == c.detail {
					found = true
					if r.Suppressed != 0 {
						t.Errorf("%q counts %d suppressed", r.Detail, r.Suppressed)
					}
				}
			}
			if !found {
				t.Errorf("%q was not recorded", c.detail)
			}
		})
	}
}
