package host

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/forever-agents/forever/agentd"
)

// Agent events: an agent's broadcasts and state changes are stored in a
// stream of their own, <prefix>.bcast.<agent> in AgentEventsStream, kept
// per agent by count and by age (--agent-events-max, --agent-events-max-age).
// A publish returns once the message is stored, so a client that follows an
// agent's events from a cursor (its stream sequence) gets every message
// after it once, with no gap and no duplicate, across a reconnect, like a
// chat stream. A client that subscribes to the subject with core NATS
// still sees each message live.

// AgentEventsStream returns the name of the agent events stream beside
// the events stream eventsStream: FOREVER_EVENTS has FOREVER_AGENT_EVENTS.
func AgentEventsStream(eventsStream string) string {
	return strings.TrimSuffix(eventsStream, "_EVENTS") + "_AGENT_EVENTS"
}

// agentEventsPublishTimeout bounds one stored publish.
const agentEventsPublishTimeout = 10 * time.Second

// addAgentEventsStream creates (or updates to the config) the agent events
// stream, replicated as the log's streams are.
func (h *Host) addAgentEventsStream(ctx context.Context, deps *agentd.Deps) error {
	cfg := jetstream.StreamConfig{
		Name:              AgentEventsStream(deps.Log.EventsStream()),
		Description:       "Forever agents' broadcasts and state changes, resumable from a cursor",
		Subjects:          []string{BroadcastSubject(deps.Log.Prefix(), ">")},
		Storage:           jetstream.FileStorage,
		Replicas:          max(deps.Log.Replicas(), 1),
		MaxMsgsPerSubject: int64(deps.Config.AgentEventsMax),
		MaxAge:            deps.Config.AgentEventsMaxAge,
		Discard:           jetstream.DiscardOld,
		AllowDirect:       true,
	}
	if deps.Config.MaxStreamConsumers > 0 {
		cfg.MaxConsumers = deps.Config.MaxStreamConsumers
	}
	// A cluster whose JetStream has no quorum yet (its nodes starting)
	// cannot create it: waited for, as the event log's streams are.
	return agentd.RetryQuorum(ctx, deps.Logger, "agent events", deps.Config.Replicas, func(ctx context.Context) error {
		s, err := deps.Log.JetStream().CreateOrUpdateStream(ctx, cfg)
		if err != nil {
			return fmt.Errorf("agentd: create stream %s: %w", cfg.Name, err)
		}
		h.agentEvents = s
		return nil
	})
}

// purgeAgentEvents drops a deleted agent's stored events.
func (h *Host) purgeAgentEvents(ctx context.Context, agent string) error {
	if h.agentEvents == nil {
		return nil
	}
	if err := h.agentEvents.Purge(ctx, jetstream.WithPurgeSubject(BroadcastSubject(h.deps.Log.Prefix(), agent))); err != nil {
		return fmt.Errorf("purge the agent events of %s: %w", agent, err)
	}
	return nil
}

// followAgentEvents hands agent's stored events after the cursor after
// to handle, one at a time, until the returned ConsumeContext stops: an
// ordered consumer, so a slow handler only reads slower, and a message
// lost in flight is fetched again rather than skipped. after 0 follows
// from the agent's first kept event. It consumes rather than iterating
// Messages: an ordered consumer whose pull is answered "no responders"
// (made while its stream steps down) makes itself again at once under
// Consume, and only after two missed heartbeats (10 s) under Messages
// (bench follow-stepdown). Its heartbeat is 1 s, so one whose server
// stopped is made again 2 s later.
func (h *Host) followAgentEvents(ctx context.Context, agent string, after uint64, handle func(jetstream.Msg)) (jetstream.ConsumeContext, error) {
	if h.agentEvents == nil {
		return nil, ErrUnavailable.Wrapf("the agent events stream is not open")
	}
	cfg := jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{BroadcastSubject(h.deps.Log.Prefix(), agent)},
		DeliverPolicy:  jetstream.DeliverAllPolicy,
	}
	if after > 0 {
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, after+1
	}
	c, err := h.agentEvents.OrderedConsumer(ctx, cfg)
	if err != nil {
		return nil, ErrUnavailable.Wrapf("follow the agent events of %s: %w", agent, err)
	}
	cc, err := c.Consume(handle, jetstream.PullHeartbeat(agentEventsHeartbeat))
	if err != nil {
		return nil, ErrUnavailable.Wrapf("follow the agent events of %s: %w", agent, err)
	}
	return cc, nil
}

// agentEventsHeartbeat is the heartbeat of an agent events follow's
// consumer.
const agentEventsHeartbeat = time.Second

// lastAgentEvent returns the stream sequence of agent's newest stored
// event, 0 when it has none: a client that starts from now resumes after
// it.
func (h *Host) lastAgentEvent(ctx context.Context, agent string) (uint64, error) {
	if h.agentEvents == nil {
		return 0, ErrUnavailable.Wrapf("the agent events stream is not open")
	}
	m, err := h.agentEvents.GetLastMsgForSubject(ctx, BroadcastSubject(h.deps.Log.Prefix(), agent))
	switch {
	case err == nil:
		return m.Sequence, nil
	case errors.Is(err, jetstream.ErrMsgNotFound):
		return 0, nil
	default:
		return 0, ErrUnavailable.Wrapf("read the agent events of %s: %w", agent, err)
	}
}
