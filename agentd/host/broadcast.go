package host

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/forever-agents/forever/agentd"
	"github.com/forever-agents/forever/agents"
)

// Message kinds on an agent's broadcast subject (and its SSE events).
const (
	KindBroadcast = "broadcast"
	KindState     = "state"
)

// BroadcastMessage is what Env.Broadcast publishes:
// {"type":"broadcast","data":...}.
type BroadcastMessage struct {
	Type string          `json:"type"`
	Data json.RawMessage `json:"data"`
}

// StateMessage is what a state change publishes, and the first message of
// every SSE events stream: {"type":"state","version":N,"value":...}.
// Version 0 with value null is an agent without state.
type StateMessage struct {
	Type    string          `json:"type"`
	Version int             `json:"version"`
	Value   json.RawMessage `json:"value"`
}

// BroadcastSubject returns the subject an agent's broadcasts and state
// changes are published on: <prefix>.bcast.<agent>.
func BroadcastSubject(prefix, agent string) string { return prefix + ".bcast." + agent }

// publisher publishes one agent's messages on its broadcast subject, stored
// in the agent events stream: a publish returns once the message is
// stored, in order from this process.
type publisher struct {
	js      jetstream.JetStream
	subject string
	max     int64
	counted *prometheus.CounterVec
}

func (h *Host) publisher(agent string) *publisher {
	return &publisher{js: h.deps.Log.JetStream(), subject: BroadcastSubject(h.deps.Log.Prefix(), agent),
		max: h.deps.Log.MaxPayload(), counted: h.bcast}
}

func (p *publisher) publish(ctx context.Context, kind string, msg any) error {
	if p == nil {
		return ErrUnavailable.Wrapf("this agent was not built by a host")
	}
	data, err := json.Marshal(msg)
	if err != nil {
		return ErrBadRequest.Wrapf("%s: %v", kind, err)
	}
	if int64(len(data)) > p.max {
		return ErrTooLarge.Wrapf("%s message of %d bytes, the server takes %d", kind, len(data), p.max)
	}
	ctx, cancel := context.WithTimeout(ctx, agentEventsPublishTimeout)
	defer cancel()
	if _, err := p.js.Publish(ctx, p.subject, data); err != nil {
		return ErrUnavailable.Wrapf("publish %s: %w", kind, err)
	}
	p.counted.WithLabelValues(kind).Inc()
	return nil
}

// Broadcast sends v, any value that encodes to JSON, to the agent's
// clients: {"type":"broadcast","data":v} on <prefix>.bcast.<agent> and on
// GET /v1/agents/{id}/events. It returns once the message is stored in the
// agent events stream, where a client resumes from its cursor; the stream
// keeps the agent's newest --agent-events-max messages for
// --agent-events-max-age. A turn's answer belongs in its chat stream
// (data-* parts), which keeps every chunk of the turn.
//
// Errors wrap ErrBadRequest (v does not encode), ErrTooLarge (over the
// server's max payload) or ErrUnavailable (not stored).
func (e *Env) Broadcast(ctx context.Context, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return ErrBadRequest.Wrapf("broadcast: %v", err)
	}
	return e.pub.publish(ctx, KindBroadcast, BroadcastMessage{Type: KindBroadcast, Data: data})
}

// PublishState tells the agent's clients its state changed:
// {"type":"state","version":version,"value":value}. The state itself is
// stored by the agent (chat.Agent.SetState appends state.set); this is the
// live notice, sent after the write. chathost calls it for every state
// change of a chat agent (the state verb, or SetState from Go).
func (e *Env) PublishState(version int, value json.RawMessage) error {
	if len(value) == 0 {
		value = json.RawMessage("null")
	}
	return e.pub.publish(context.Background(), KindState, StateMessage{Type: KindState, Version: version, Value: value})
}

// addAgentsView adds the view of every agent to deps.Views and the
// metrics of listing, deletion and broadcast.
func (h *Host) addAgentsView(deps *agentd.Deps) error {
	if err := deps.Views.Add(agents.Projection()); err != nil {
		return err
	}
	v, err := deps.Log.View(agents.ProjectionName)
	if err != nil {
		return err
	}
	h.agents = agents.NewView(v)
	h.deleted = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "forever_agentd_agents_deleted_total",
		Help: "Agents deleted by this node (the delete verb).",
	})
	h.bcast = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "forever_agentd_broadcasts_total",
		Help: "Messages published on agents' broadcast subjects, by kind (broadcast, state).",
	}, []string{"kind"})
	h.watchers = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "forever_agentd_event_streams",
		Help: "Clients following an agent's broadcasts and state on GET /v1/agents/{id}/events.",
	})
	for _, k := range []string{KindBroadcast, KindState} {
		h.bcast.WithLabelValues(k)
	}
	for _, c := range []prometheus.Collector{h.deleted, h.bcast, h.watchers} {
		if err := deps.Registerer.Register(c); err != nil {
			return fmt.Errorf("agentd: register host metrics: %w", err)
		}
	}
	return nil
}
