package agentd

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
)

// metaPoll is how often waitMeta looks at the server's meta layer.
const metaPoll = 20 * time.Millisecond

// metaNudgeEvery is how often waitMeta nudges the meta leader while the
// server's meta layer is behind it.
const metaNudgeEvery = 100 * time.Millisecond

// waitMeta waits, at most bound, until the embedded clustered server's
// JetStream meta layer has a leader, recovered its state and is current
// with the leader, and reports whether it got there. Until then the
// server's JetStream API requests go unanswered (nats-server answers a
// stream create or update on the meta leader only, which the request
// reaches once the routes and the meta state are up): a restarted node
// that sent its first request at once lost a whole attempt of
// RetryQuorum. A cluster with no quorum (its first nodes starting) never
// gets there, and is then waited for by RetryQuorum, after bound.
//
// While the server has routes but is not current, waitMeta calls nudge
// (when not nil) every metaNudgeEvery. A restarted member learns who
// leads the meta layer from the leader's next append entry, and ends its
// catch-up only at the entry after that; an idle leader sends one only
// when it sent nothing for nats-server's heartbeat interval (1 s, looked
// at every 1 s), so a restart waited 1-3 s for two of them. A proposal of
// the leader's (nudgeMeta's) sends one at once.
func waitMeta(ctx context.Context, s *server.Server, bound time.Duration, nudge func()) bool {
	deadline := time.Now().Add(bound)
	var nudged time.Time
	for {
		if s.Healthz(&server.HealthzOptions{JSMetaOnly: true}).StatusCode == http.StatusOK {
			return true
		}
		if !time.Now().Before(deadline) {
			return false
		}
		if nudge != nil && s.NumRoutes() > 0 && time.Since(nudged) >= metaNudgeEvery {
			nudge()
			nudged = time.Now()
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(metaPoll):
		}
	}
}

// metaNudgeTTL is how long a nudge's consumer lives unused before the
// server deletes it.
const metaNudgeTTL = time.Second

// metaNudgePrefix starts the name of every nudge's consumer, so an
// operator who lists a bucket's consumers during a restart knows them.
const metaNudgePrefix = "agentd_meta_nudge_"

// nudgeMeta returns a nudge for waitMeta: a request, sent through nc and
// not awaited, that the meta leader create an ephemeral consumer on
// stream, which makes the leader append to the meta log and so send its
// followers an append entry at once. The consumer is the least the
// server can be asked to place: one replica, in memory, no acks, from
// the stream's end, and deleted by the server once unused for
// metaNudgeTTL. A stream that does not exist yet (a new cluster) gets an
// error, which nobody reads.
func nudgeMeta(nc *nats.Conn, stream string) func() {
	return func() {
		name := metaNudgePrefix + nuid.Next()
		req, err := json.Marshal(struct {
			Stream string                   `json:"stream_name"`
			Config jetstream.ConsumerConfig `json:"config"`
			Action string                   `json:"action"`
		}{stream, jetstream.ConsumerConfig{
			Name:              name,
			DeliverPolicy:     jetstream.DeliverNewPolicy,
			AckPolicy:         jetstream.AckNonePolicy,
			InactiveThreshold: metaNudgeTTL,
			Replicas:          1,
			MemoryStorage:     true,
		}, "create"})
		if err != nil {
			return
		}
		// The answer goes to an inbox nobody listens on: waitMeta looks at
		// the server, not at the reply.
		_ = nc.PublishRequest(jetstream.DefaultAPIPrefix+"CONSUMER.CREATE."+stream+"."+name, nats.NewInbox(), req)
	}
}
