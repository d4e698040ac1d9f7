package eventlog

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// A write whose answer a stream's leader change lost. A replicated
// stream's leader that steps down (the leaders' spread after a node
// returns, an operator's stepdown) or dies drops the proposals it had
// not committed, and nobody answers their publishers: a fenced append
// then waited out Config.AckTimeout (5 s) before it was resolved as
// unconfirmed, and its agent stalled that long (a 6-node chaos run, stop
// 62: an agent of a shard whose leader was moved, 4.9 s).
//
// So a replicated log follows its account's leader-elected advisories
// ($JS.EVENT.ADVISORY.STREAM.LEADER_ELECTED.<stream>), and a write to a
// stream that elects a leader while its answer is awaited waits
// electionGrace more (the new leader answers what it applies of the old
// one's log), then ends as unconfirmed: sent again at once where that is
// safe (a message id and no expected sequence, deduplicated), otherwise
// resolved by the fence as any lost acknowledgement. Without the
// advisories (a user not allowed them) writes wait Config.AckTimeout as
// before.
const (
	leaderElectedAdvisories = "$JS.EVENT.ADVISORY.STREAM.LEADER_ELECTED.*"
	// electionGrace is how long a write awaits its answer after its
	// stream elected a leader.
	electionGrace = 250 * time.Millisecond
)

// ErrLeaderElected is wrapped by the ErrUnconfirmed of a write whose
// answer its stream's leader change lost: the stream has a new leader, so
// a caller may go on at once (agentd's host restarts the agent to recover
// without its usual wait for an outage to end).
var ErrLeaderElected = errors.New("eventlog: the stream elected a leader while the write's answer was awaited")

// elections hands out, per stream, a context that ends electionGrace
// after the stream's next leader election. The zero value is off: its
// contexts never end.
type elections struct {
	mu  sync.Mutex
	gen map[string]election // nil while off
}

type election struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
}

// watch subscribes nc to the leader-elected advisories of its account.
func (e *elections) watch(nc *nats.Conn) (*nats.Subscription, error) {
	sub, err := nc.Subscribe(leaderElectedAdvisories, func(m *nats.Msg) {
		e.elected(m.Subject[strings.LastIndexByte(m.Subject, '.')+1:])
	})
	if err != nil {
		return nil, err
	}
	e.mu.Lock()
	e.gen = map[string]election{}
	e.mu.Unlock()
	return sub, nil
}

// next returns the context that ends (with ErrLeaderElected as its cause)
// electionGrace after stream's next election: take it before sending.
func (e *elections) next(stream string) context.Context {
	if e.gen == nil {
		// Off: watch, which alone sets gen, runs in Open before any
		// write, so this read needs no lock (and an R1 log's publishes
		// take none).
		return context.Background()
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	g, ok := e.gen[stream]
	if !ok {
		g.ctx, g.cancel = context.WithCancelCause(context.Background())
		e.gen[stream] = g
	}
	return g.ctx
}

// elected ends stream's current generation after electionGrace; writes
// sent from now on take the next.
func (e *elections) elected(stream string) {
	e.mu.Lock()
	g, ok := e.gen[stream]
	delete(e.gen, stream)
	e.mu.Unlock()
	if ok {
		time.AfterFunc(electionGrace, func() { g.cancel(ErrLeaderElected) })
	}
}

// untilElected returns ctx, ended also when gen (elections.next) ends,
// and a stop to call once the answer came; leaderElected reports whether
// the returned context ended for that.
func untilElected(ctx, gen context.Context) (context.Context, func()) {
	if gen.Done() == nil {
		return ctx, func() {}
	}
	cctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(gen, func() { cancel(context.Cause(gen)) })
	return cctx, func() {
		stop()
		cancel(nil)
	}
}

// leaderElected reports whether ctx ended for its stream's election
// (untilElected).
func leaderElected(ctx context.Context) bool {
	return errors.Is(context.Cause(ctx), ErrLeaderElected)
}
