package eventlog

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// A view's consumer on a replica that is catching up. JetStream places
// an ordered consumer (R1) on any replica of a replicated stream it deems
// active, and prefers the ones whose meta state is current, not the ones
// whose copy of the stream is: a replica on a node restarted a moment ago
// is active while it still fetches the stream's last events, and a
// consumer placed there delivers none of them until it has
// (TestCatchUpPastAQuietConsumer). A catch-up then waits for renewAfter
// before it tries again, and may land there again.
//
// So the views' follows (Follower) check where each consumer was placed,
// beside its first deliveries: on a replica offline, or far behind its
// stream's leader (replicaBehind), the follow ends with a
// *placedBehindError, and the Follower's pump follows again at once
// from its last event, up to placeAgainTries times a pump; then the
// consumer is kept, and the renewal after renewAfter goes on as before.
// The check also remembers where it found each stream's consumer, which
// the log line of a renewal names (placedOn): in a 6-node chaos run
// (docs/benchmarks.md, stop 61) half of the consumers renewed were on a
// server killed since, and most others on the stream's leader, so
// placement is one cause of a quiet consumer, not the common one.
// One STREAM.INFO per consumer created, only of a replicated log that
// creates its streams (Bind may not read their info). Reads and client
// follows do not check: they start often and end soon.

// placedBehindError ends a follow whose consumer was placed on a replica
// far behind its stream's leader, or on a server stopping
// (Config.Leaving).
type placedBehindError struct{ stream, server string }

func (e *placedBehindError) Error() string {
	return fmt.Sprintf("eventlog: follow %s: the consumer was placed on %s, a replica far behind the stream's leader or a server stopping", e.stream, e.server)
}

// placeAgainTries bounds how often a Follower's pump places its consumer
// again.
const placeAgainTries = 3

// placementCheckTimeout bounds the stream info a placement check reads.
const placementCheckTimeout = 2 * time.Second

// placedBehind reports whether cons, an ordered consumer of stream just
// created, is on a replica of the stream that is not current, or on a
// server stopping (Config.Leaving), and which server it is on. Anything
// it cannot tell is not behind.
func (l *Log) placedBehind(ctx context.Context, stream string, cons jetstream.Consumer) (server string, behind bool) {
	if l.placedBehindHook != nil {
		return "test", l.placedBehindHook(stream)
	}
	if l.cfg.Replicas < 2 || l.cfg.Bind {
		return "", false
	}
	ci := cons.CachedInfo()
	if ci == nil || ci.Cluster == nil || ci.Cluster.Leader == "" {
		return "", false
	}
	server = ci.Cluster.Leader
	if l.cfg.Leaving != nil && l.cfg.Leaving(server) {
		l.placements.Store(stream, placement{server: server, state: "its node is stopping"})
		return server, true
	}
	ictx, cancel := context.WithTimeout(ctx, placementCheckTimeout)
	defer cancel()
	s, err := l.js.Stream(ictx, stream)
	if err != nil {
		l.placements.Store(stream, placement{server: server, state: "unknown: " + err.Error()})
		return server, false
	}
	c := s.CachedInfo().Cluster
	l.placements.Store(stream, placement{server: server, state: replicaState(c, server)})
	return server, replicaBehind(c, server)
}

// placement is where a stream's last views consumer checked was placed,
// and how its stream's leader reported that replica then.
type placement struct{ server, state string }

// placedOn describes where stream's last views consumer checked was
// placed ("" before any), for a log line.
func (l *Log) placedOn(stream string) string {
	v, ok := l.placements.Load(stream)
	if !ok {
		return ""
	}
	p := v.(placement)
	return p.server + " (" + p.state + ")"
}

// replicaState is how c reports server's replica: the leader, current,
// behind by n, offline, or not named.
func replicaState(c *jetstream.ClusterInfo, server string) string {
	switch {
	case c == nil || c.Leader == "":
		return "the stream has no leader"
	case c.Leader == server:
		return "the leader"
	}
	for _, r := range c.Replicas {
		if r == nil || r.Name != server {
			continue
		}
		switch {
		case r.Offline:
			return "offline"
		case r.Current:
			return fmt.Sprintf("current, last heard %s ago", r.Active.Round(time.Millisecond))
		}
		return fmt.Sprintf("%d entries behind, last heard %s ago", r.Lag, r.Active.Round(time.Millisecond))
	}
	return "not a replica the leader names"
}

// replicaBehind reports whether server holds a replica of the stream c
// describes that is offline, or that its leader reports at least
// placeBehindLag entries behind (a replica under load is not current for
// a moment now and then, a few entries behind; one catching up is
// thousands). The leader, or a server c does not name, is not behind.
func replicaBehind(c *jetstream.ClusterInfo, server string) bool {
	if c == nil || c.Leader == "" || c.Leader == server {
		return false
	}
	for _, r := range c.Replicas {
		if r != nil && r.Name == server {
			return r.Offline || !r.Current && r.Lag >= placeBehindLag
		}
	}
	return false
}

// placeBehindLag is how far behind its leader a replica is catching up.
const placeBehindLag = 64
