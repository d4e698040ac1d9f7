package audit_test

import (
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/forever-agents/forever/agentd/audit"
)

// TestTailFromReplicaBehind: a listing (no follow) returns every record up
// to the last one the stream's leader held when it began, even when its
// consumer, on a replica behind the leader, says none pending before it:
// of every tenant, and the last n of one tenant.
func TestTailFromReplicaBehind(t *testing.T) {
	l, js := openLog(t)
	for i := range 4 {
		l.Record(audit.Record{Tenant: "acme", Action: "chat", Agent: string(rune('a' + i)), Outcome: audit.OK})
	}
	l.Record(audit.Record{Tenant: "beta", Action: "chat", Agent: "b", Outcome: audit.OK})
	tail(t, js, "", 0, 5) // all stored
	for _, c := range []struct {
		tenant string
		n      int
		want   string
	}{{"", 0, "abcdb"}, {"acme", 2, "cd"}, {"acme", 0, "abcd"}} {
		var got string
		first := true
		err := audit.TailDelivered(t.Context(), js, c.tenant, c.n, func(r audit.Record) error { got += r.Agent; return nil },
			func(md *jetstream.MsgMetadata) {
				if first {
					md.NumPending = 0 // all the replica holds yet
					first = false
				}
			})
		if err != nil {
			t.Fatal(err)
		}
		if got != c.want {
			t.Errorf("tenant %q, last %d, from a replica behind: records of agents %q, want %q", c.tenant, c.n, got, c.want)
		}
	}
}

// TestTailEndsOnRecordsRemoved: a listing whose records past the one
// delivered were removed meanwhile (the stream purged, as age or size
// removes them) ends, instead of waiting for what the leader no longer
// holds.
func TestTailEndsOnRecordsRemoved(t *testing.T) {
	l, js := openLog(t)
	for i := range 3 {
		l.Record(audit.Record{Tenant: "acme", Action: "chat", Agent: string(rune('a' + i)), Outcome: audit.OK})
	}
	tail(t, js, "", 0, 3)
	st, err := js.Stream(t.Context(), audit.Stream)
	if err != nil {
		t.Fatal(err)
	}
	var got string
	first := true
	err = audit.TailDelivered(t.Context(), js, "", 0, func(r audit.Record) error { got += r.Agent; return nil },
		func(md *jetstream.MsgMetadata) {
			if first {
				first = false
				if err := st.Purge(t.Context()); err != nil {
					t.Error(err)
				}
				md.NumPending = 0
			}
		})
	if err != nil || got != "a" {
		t.Fatalf("listing with the records after the first removed: %q, %v; want \"a\" and its end", got, err)
	}
}
