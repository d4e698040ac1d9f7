package quota

import (
	"context"

	"github.com/forever-agents/forever/eventlog"
	"github.com/nats-io/nats.go/jetstream"
)

// Usage is what a tenant uses of the quotas that count something stored:
// the agents with events, and its account's JetStream use.
type Usage struct {
	// Agents is the number of agents with events in the log (the agents
	// quota counts them).
	Agents int `json:"agents"`
	// Bytes is the account's JetStream file storage (the bytes quota).
	Bytes int64 `json:"bytes"`
	// Memory is the account's JetStream memory storage.
	Memory int64 `json:"memory"`
	// Streams and Consumers are the account's JetStream streams and
	// consumers, agentd's own included.
	Streams   int `json:"streams"`
	Consumers int `json:"consumers"`
}

// ReadUsage reads the usage of the account js belongs to: two JetStream
// API requests (account info, and the events stream's subject count), so
// cheap enough to poll. A JetStream that does not answer is a 503 error.
func ReadUsage(ctx context.Context, js jetstream.JetStream) (Usage, error) {
	info, err := js.AccountInfo(ctx)
	if err != nil {
		return Usage{}, unavailable("usage", err)
	}
	u := Usage{Bytes: int64(info.Store), Memory: int64(info.Memory), Streams: info.Streams, Consumers: info.Consumers}
	s, err := js.Stream(ctx, eventlog.DefaultEventsStream)
	if err != nil {
		return Usage{}, unavailable("usage", err)
	}
	// One subject an agent: <prefix>.evt.<agent>.
	u.Agents = int(s.CachedInfo().State.NumSubjects)
	return u, nil
}
