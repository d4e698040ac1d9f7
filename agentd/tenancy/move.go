package tenancy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/forever-agents/forever/internal/inproc"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"

	"github.com/forever-agents/forever/agentd"
	"github.com/forever-agents/forever/agentd/host"
	"github.com/forever-agents/forever/auth"
	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/internal/kvlock"
	"github.com/forever-agents/forever/ownership"
	"github.com/forever-agents/forever/tracing"
)

// Moving a tenant's log into its node's shards (agentd tenant move). A
// tenant created by a release that kept tenants unsharded has one
// FOREVER_EVENTS and one FOREVER_CHUNKS in its account, and keeps them:
// a log that exists keeps its layout. The move takes it into the shard
// layout of the node that answers (Daemon.Shards: the count agentd's own
// cluster stored, which new tenants take too) while the cluster serves;
// only the tenant pauses:
//
//  0. The move takes the tenant's move lock (lockMove: a key with a TTL in
//     the tenant's lease bucket, renewed while it runs), so two moves of
//     one tenant never run at once: the second's copy would delete the
//     first's shards under it, and the first could record a partial copy.
//  1. Its record gets Moving (auth.Tenant.Moving), stored by
//     compare-and-set: every node's registry watch stops the tenant's
//     daemon (it hands its partitions off and drops its heartbeat), its
//     HTTP requests get 503, and its account is pushed with room for the
//     copy (accountLimits: the unsharded pair beside the shards, the log's
//     bytes twice).
//  2. The move waits until no node's heartbeat is in the tenant's lease
//     bucket (a node of an earlier release, which does not know Moving,
//     keeps serving the tenant: the move is refused, the tenant resumed).
//  3. agentd.MoveToShards moves the log in the tenant's account as agentd
//     shards move does agentd's own: the old streams parked, every message
//     copied in order with its type, writer and epoch headers (fencing
//     and verify read them), the sequence references rewritten, the shard
//     count and record format stored in the tenant's partitions bucket
//     (from then on no daemon of the old layout starts), the old streams
//     deleted.
//  4. Moving is cleared: every node starts the tenant's daemon again, on
//     the stored shard count; its views rebuild from the shards (eventlog
//     drops the views of the other layout) and its account gets its usual
//     limits.
//
// A move that fails after its copy began leaves the tenant stopped
// (Moving): running the move again finishes it, as for agentd shards
// move. One that fails before (the node is unsharded, a node still runs
// the tenant) changes nothing, or resumes the tenant.

// AdminMoveSubject moves a tenant's log into its node's shards: the
// payload is a RevokeRequest (the tenant's name), the reply a MoveReply.
const AdminMoveSubject = "forever.admin.tenant.move"

// moveTimeout bounds a tenant move, its copy included (agentd tenant move
// waits as long).
const moveTimeout = time.Hour

// moveLockKey is the key, in the tenant's lease bucket (which the
// ownership manager reads only for node. and lease. keys), of the move
// that runs (lockMove); its value names the node and when it began.
const moveLockKey = "tenant-move"

// moveLockTTL is how long a move's lock outlives its last renewal (every
// third of it): a move whose node died lets the next one go after it.
const moveLockTTL = 30 * time.Second

// moveStopTimeout bounds the wait for every node to stop the tenant's
// daemon: a node that crashed keeps its heartbeat for a lease TTL.
const moveStopTimeout = tenantStartTimeout

// MoveReply is the reply of AdminMoveSubject: what the move did.
type MoveReply struct {
	Tenant string `json:"tenant"`
	// Shards and Partitions are the tenant's layout after the move.
	Shards     int `json:"shards"`
	Partitions int `json:"partitions"`
	// Moved is set when the log was copied now; false when it already was
	// in the node's shards (nothing to do), or when Finished.
	Moved bool `json:"moved"`
	// Finished is set when a move stopped part way was finished (its copy
	// was recorded, the unsharded streams deleted now).
	Finished bool `json:"finished,omitempty"`
	// Agents, Events, Chunks and Remapped are what the copy moved
	// (eventlog.MoveReport); PerShard the messages copied into each shard.
	Agents   int      `json:"agents"`
	Events   uint64   `json:"events"`
	Chunks   uint64   `json:"chunks"`
	Remapped int      `json:"remapped"`
	PerShard []uint64 `json:"perShard,omitempty"`
	// TookMS is how long the move took, the tenant's pause, in
	// milliseconds; CopyMS the copy's share (the rest: the daemons'
	// stop, and their start, views rebuilt from the shards).
	TookMS int64 `json:"tookMs"`
	CopyMS int64 `json:"copyMs"`
}

// moveRoom is quota q (resolved) with the room a move's copy needs
// (accountLimits): the unsharded streams stay beside the shards until the
// copy is recorded (2 more streams), the log is stored twice meanwhile
// (bytes doubled), and the copy reads each stream with a consumer of its
// own (1 more, 2 for margin). A limit of 0 (none) stays none.
func moveRoom(q auth.Quota) auth.Quota {
	if q.Streams > 0 {
		q.Streams += 2
	}
	if q.Bytes > 0 {
		q.Bytes *= 2
	}
	if q.Consumers > 0 {
		q.Consumers += 2
	}
	return q
}

// errMoving refuses a change of tenant name's record (create, disable,
// enable) while its log moves into shards.
func errMoving(name string) error {
	return host.ErrConflict.Wrapf("tenant %s is moving into shards: retry when the move ends (agentd tenant move %s finishes one that stopped)", name, name)
}

// handleMove moves tenant req.Name's log into the node's shards (see
// above). It answers 400 for a bad name, 404 for a tenant nobody created,
// 409 for a disabled tenant, an unsharded node, a tenant with another
// shard count, or nodes still serving the tenant (an earlier release), 503
// for a move that stopped part way (run it again).
func (ts *tenantSet) handleMove(ctx context.Context, data []byte) (any, error) {
	start := time.Now()
	var req RevokeRequest
	if err := json.Unmarshal(data, &req); err != nil {
		return nil, host.ErrBadRequest.Wrapf("tenant move: %v", err)
	}
	if err := auth.CheckName(req.Name); err != nil {
		return nil, refused(host.ErrBadRequest, err, "%s")
	}
	ctx, span := tracing.New(ts.deps.Config.TracerProvider, "agentd/tenancy").Start(ctx, "tenant move")
	defer span.End()
	span.SetAttributes(attribute.String("forever.tenant", req.Name))
	reply, err := ts.move(ctx, req.Name)
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
		ts.moves.WithLabelValues("failed").Inc()
		return nil, err
	}
	reply.TookMS = time.Since(start).Milliseconds()
	outcome := "moved"
	switch {
	case reply.Finished:
		outcome = "finished"
	case !reply.Moved:
		outcome = "already"
	}
	ts.moves.WithLabelValues(outcome).Inc()
	span.SetAttributes(attribute.String("forever.outcome", outcome), attribute.Int("forever.shards", reply.Shards))
	return reply, nil
}

// move runs handleMove's steps.
func (ts *tenantSet) move(ctx context.Context, name string) (MoveReply, error) {
	logger := ts.logger.With("tenant", name, "op", "move")
	k := ts.parent.Shards()
	if k < 2 {
		return MoveReply{}, host.ErrConflict.Wrapf("tenant move: this node's log is unsharded, and a tenant's log moves into its node's shards: move agentd's own log first (agentd shards move), or create the cluster with shards")
	}
	t, err := ts.readRecord(ctx, name)
	if err != nil {
		return MoveReply{}, err
	}
	if t.Disabled {
		return MoveReply{}, host.ErrConflict.Wrapf("tenant %s is disabled: agentd tenant enable %s first", name, name)
	}
	nc, err := ts.tenantConn(t)
	if err != nil {
		return MoveReply{}, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return MoveReply{}, err
	}
	layout, err := ownership.ReadLayout(ctx, js)
	if err != nil {
		return MoveReply{}, host.ErrUnavailable.Wrapf("tenant %s: read its layout: %w", name, err)
	}
	reply := MoveReply{Tenant: name, Shards: k, Partitions: layout.Partitions}
	switch {
	case layout.Shards == k && !t.Moving:
		logger.Info("tenant move: its log already is in the node's shards", "shards", k)
		return reply, nil
	case layout.Shards != 0 && layout.Shards != k:
		return MoveReply{}, host.ErrConflict.Wrapf("tenant %s has %d shards and this node %d: a move takes an unsharded log into the node's shards, not one count to another", name, layout.Shards, k)
	}
	// 0. One move of the tenant at a time.
	ctx, unlock, err := lockMove(ctx, js, name, ts.parent.Config().ServerName)
	if err != nil {
		return MoveReply{}, err
	}
	defer unlock()
	// 1. Every node stops the tenant's daemon.
	if !t.Moving {
		if _, err := ts.update(ctx, name, false, func(t *auth.Tenant, _ bool) error {
			if t.Disabled {
				return host.ErrConflict.Wrapf("tenant %s is disabled: agentd tenant enable %s first", name, name)
			}
			t.Moving = true
			return nil
		}); err != nil {
			return MoveReply{}, err
		}
		logger.Info("tenant move: its daemons stop on every node", "shards", k)
	}
	ts.waitStopped(ctx, name)
	// 2. No node serves it any more.
	if live, err := waitNoNodes(ctx, js, ts.moveStop); err != nil || len(live) > 0 {
		if err == nil {
			err = host.ErrConflict.Wrapf("tenant %s: nodes still serve it after %s: %v (a node of a release without tenant moves: upgrade every node first)", name, ts.moveStop, live)
		}
		return MoveReply{}, ts.resume(ctx, name, err)
	}
	// 3. The copy.
	mctx, cancel := context.WithTimeout(ctx, moveTimeout)
	defer cancel()
	mv, err := agentd.MoveToShards(mctx, nc, k, ts.parent.Config().Partitions, logger)
	switch {
	case errors.Is(err, agentd.ErrNodesRunning), errors.Is(err, agentd.ErrShardsMoveRunning):
		return MoveReply{}, ts.resume(ctx, name, host.ErrConflict.Wrapf("tenant %s: %w", name, err))
	case errors.Is(err, eventlog.ErrNothingToMove):
		return MoveReply{}, ts.resume(ctx, name, host.ErrConflict.Wrapf("tenant %s: %w", name, err))
	case err != nil:
		if cause := context.Cause(ctx); ctx.Err() != nil && cause != nil && !errors.Is(err, cause) {
			err = fmt.Errorf("%w: %w", err, cause)
		}
		logger.Error("tenant move stopped part way: the tenant stays stopped until a move finishes it", "err", err)
		return MoveReply{}, host.ErrUnavailable.Wrapf("tenant %s: the move stopped part way: %w; the tenant stays stopped: run agentd tenant move %s again to finish it", name, err, name)
	}
	reply.Shards, reply.Partitions, reply.Finished, reply.Moved = mv.Shards, mv.Partitions, mv.Finished, !mv.Finished
	reply.Agents, reply.Events, reply.Chunks, reply.Remapped, reply.PerShard = mv.Agents, mv.Events, mv.Chunks, mv.Remapped, mv.PerShard
	reply.CopyMS = mv.Took.Milliseconds()
	logger.Info("tenant log moved into shards", "shards", mv.Shards, "agents", mv.Agents, "events", mv.Events, "chunks", mv.Chunks, "finished", mv.Finished, "copy", mv.Took)
	// 4. Every node starts it again, on its shards.
	if err := ts.resume(ctx, name, nil); err != nil {
		return MoveReply{}, err
	}
	return reply, nil
}

// resume clears tenant name's Moving, so every node serves it again, and
// waits until this node's daemon is ready; it returns cause (the reason
// the move did not happen) when set, else the resume's error.
func (ts *tenantSet) resume(ctx context.Context, name string, cause error) error {
	_, err := ts.update(ctx, name, false, func(t *auth.Tenant, _ bool) error {
		t.Moving = false
		return nil
	})
	if err == nil {
		wctx, cancel := context.WithTimeout(ctx, tenantStartTimeout)
		defer cancel()
		err = ts.waitStarted(wctx, name)
	}
	if cause != nil {
		if err != nil {
			ts.logger.Error("tenant move refused; its daemons start again", "tenant", name, "err", err)
		}
		return cause
	}
	return err
}

// readRecord reads tenant name's record from the registry: 404 when
// nobody created it.
func (ts *tenantSet) readRecord(ctx context.Context, name string) (*auth.Tenant, error) {
	e, err := ts.kv.Get(ctx, name)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, host.ErrNotFound.Wrapf("tenant %q", name)
	}
	if err != nil {
		return nil, host.ErrUnavailable.Wrapf("tenant registry: %w", err)
	}
	var t auth.Tenant
	if err := json.Unmarshal(e.Value(), &t); err != nil {
		return nil, fmt.Errorf("tenant %q: stored record: %w", name, err)
	}
	return &t, nil
}

// tenantConn connects to tenant t's account as agentd's user there, as
// the tenant's daemon connects (in process to the node's embedded server,
// else to --nats-url with the node's TLS).
func (ts *tenantSet) tenantConn(t *auth.Tenant) (*nats.Conn, error) {
	user, err := ts.op.Keys.TenantRuntimeUser(t)
	if err != nil {
		return nil, err
	}
	opts := []nats.Option{nats.Name("agentd tenant move " + t.Name), nats.UserJWTAndSeed(user.JWT, string(user.Seed))}
	url := ts.deps.Config.NATSURL
	if s := ts.deps.Server; s != nil {
		url = agentd.InProcessURL(s)
		opts = append(opts, inproc.Server(s))
	} else {
		opts = append(opts, ts.deps.Config.ClientTLS()...)
	}
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		return nil, host.ErrUnavailable.Wrapf("tenant %s: connect to its account: %w", t.Name, err)
	}
	return nc, nil
}

// lockMove takes tenant name's move lock in js's account (its lease
// bucket): a key created with a TTL of moveLockTTL, renewed every third
// of it by compare-and-set (internal/kvlock). It returns a context that
// is cancelled when a renewal fails (the move must stop: another may take
// the lock once it lapsed), and unlock, which stops the renewals and
// deletes the key. A lock another move holds is 409, naming its node; a
// tenant without a lease bucket never ran, and has nothing to move (409).
func lockMove(ctx context.Context, js jetstream.JetStream, name, node string) (context.Context, func(), error) {
	kv, err := js.KeyValue(ctx, ownership.DefaultBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, nil, host.ErrConflict.Wrapf("tenant %s has no lease bucket: it never ran, and has no log to move", name)
	}
	if err != nil {
		return nil, nil, host.ErrUnavailable.Wrapf("tenant %s: its lease bucket: %w", name, err)
	}
	lctx, unlock, err := kvlock.Take(ctx, js, kv, moveLockKey, node, moveLockTTL)
	var held *kvlock.HeldError
	if errors.As(err, &held) {
		return nil, nil, host.ErrConflict.Wrapf("a move of tenant %s runs (on %s): wait for its answer (a move whose node died lets go within %s)", name, held.Holder, moveLockTTL)
	}
	if err != nil {
		return nil, nil, host.ErrUnavailable.Wrapf("tenant %s: take the move lock: %w", name, err)
	}
	return lctx, unlock, nil
}

// waitNoNodes waits, up to within, until no node's heartbeat is in the
// lease bucket of js's account, and returns the nodes still there at the
// last read that answered; an error when none did.
func waitNoNodes(ctx context.Context, js jetstream.JetStream, within time.Duration) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	var last []string // of the last read that answered
	var lastErr error
	read := false
	for {
		live, err := ownership.LiveNodes(ctx, js)
		switch {
		case err == nil && len(live) == 0:
			return nil, nil
		case err == nil:
			last, read = live, true
		default:
			lastErr = err
		}
		select {
		case <-ctx.Done():
			if !read {
				return nil, host.ErrUnavailable.Wrapf("read the tenant's lease bucket: %w", lastErr)
			}
			return last, nil
		case <-time.After(200 * time.Millisecond): // not a synchronisation: a poll of the bucket's node keys
		}
	}
}
