package eventlog

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// TestReplicaBehind: a consumer is placed again only from a replica its
// stream's leader reports offline or far behind; the leader, a replica a
// few entries behind for a moment, a server the info does not name, and
// a stream without a leader (nothing to tell) keep it.
func TestReplicaBehind(t *testing.T) {
	c := &jetstream.ClusterInfo{Leader: "n1", Replicas: []*jetstream.PeerInfo{
		{Name: "n2", Current: true},
		{Name: "n3", Current: false, Lag: 5000},
		{Name: "n4", Current: false, Lag: 3},
		{Name: "n5", Current: true, Offline: true},
		nil,
	}}
	for _, tt := range []struct {
		c      *jetstream.ClusterInfo
		server string
		want   bool
	}{
		{c, "n1", false},
		{c, "n2", false},
		{c, "n3", true},
		{c, "n4", false},
		{c, "n5", true},
		{c, "n9", false},
		{&jetstream.ClusterInfo{Replicas: c.Replicas}, "n3", false},
		{nil, "n3", false},
	} {
		if got := replicaBehind(tt.c, tt.server); got != tt.want {
			t.Errorf("replicaBehind(leader %q, %q) = %v, want %v", func() string {
				if tt.c == nil {
					return "<nil info>"
				}
				return tt.c.Leader
			}(), tt.server, got, tt.want)
		}
	}
}

// TestReplicaState: the log line of a consumer that delivered nothing
// says how the stream's leader reported the replica it was placed on.
func TestReplicaState(t *testing.T) {
	c := &jetstream.ClusterInfo{Leader: "n1", Replicas: []*jetstream.PeerInfo{
		{Name: "n2", Current: true, Active: 300 * time.Millisecond},
		{Name: "n3", Lag: 5000, Active: 2 * time.Second},
		{Name: "n5", Offline: true},
	}}
	for server, want := range map[string]string{
		"n1": "the leader",
		"n2": "current, last heard 300ms ago",
		"n3": "5000 entries behind, last heard 2s ago",
		"n5": "offline",
		"n9": "not a replica the leader names",
	} {
		if got := replicaState(c, server); got != want {
			t.Errorf("replicaState(%q) = %q, want %q", server, got, want)
		}
	}
	if got := replicaState(&jetstream.ClusterInfo{}, "n1"); got != "the stream has no leader" {
		t.Errorf("replicaState without a leader = %q", got)
	}
}
