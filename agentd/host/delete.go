package host

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/forever-agents/forever/eventlog"
)

// DeleteReply is the reply of the delete verb.
type DeleteReply struct {
	Agent   string `json:"agent"`
	Deleted bool   `json:"deleted"`
	// Tombstone is the sequence of the agent's tombstone in the events
	// stream: all the log keeps of it.
	Tombstone eventlog.Seq `json:"tombstone"`
	// Again is set when the agent was already deleted: the purges ran
	// again, nothing else changed.
	Again bool `json:"again,omitempty"`
}

// deleteTries bounds the tries of a delete whose tombstone conflicts with
// a last append of the agent (a compaction's snapshot landing meanwhile).
const deleteTries = 5

// deleteAgent answers the delete verb on the agent's owner: it stops the
// agent (its fibers are interrupted; no command, schedule, compaction or
// retention sweep reaches it meanwhile), deletes it from the log
// (eventlog.Log.Delete: its events and chunks purged, tombstones left, its
// rows gone from every view), and answers once this node's views applied
// the tombstone. The id can then be used again: the agent starts empty.
// The type's delete hook (SetOnDelete), if any, runs before the log
// delete (the views caught up with the agent) and its after func once the
// delete is done.
//
// Errors: ErrNotFound for an agent with nothing stored, ErrConflict while
// another delete of it runs, else a log error (retry: a delete that
// stopped part way is completed by the next).
func (h *Host) deleteAgent(ctx context.Context, agent string) (any, error) {
	h.mu.Lock()
	if h.mu.deleting[agent] {
		h.mu.Unlock()
		return nil, ErrConflict.Wrapf("agent %q is being deleted", agent)
	}
	h.mu.deleting[agent] = true
	inst := h.mu.agents[agent]
	if inst != nil {
		delete(h.mu.agents, agent)
	}
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		delete(h.mu.deleting, agent)
		h.mu.Unlock()
	}()
	if inst != nil {
		if err := h.quiesce(ctx, inst); err != nil {
			return nil, err
		}
	}
	var after func(context.Context)
	if typ, _ := h.TypeOf(agent); h.onDelete[typ] != nil {
		if err := h.catchUpViews(ctx, agent); err != nil {
			return nil, err
		}
		var err error
		if after, err = h.onDelete[typ](ctx, agent); err != nil {
			return nil, err
		}
	}
	// The intent goes before the forks are listed: a fork made meanwhile
	// on another node either is listed (its agent.forked came first) or
	// finds the intent after the parent's sequence it forked at, and
	// undoes itself (forkHere).
	if err := h.markDeleting(ctx, agent); err != nil {
		return nil, err
	}
	if err := h.detachForks(ctx, agent); err != nil {
		return nil, err
	}
	var d eventlog.Deleted
	var err error
	for try := 0; try < deleteTries; try++ {
		d, err = h.deps.Log.Delete(ctx, agent)
		if !errors.Is(err, eventlog.ErrConflict) {
			break
		}
	}
	// Its stored broadcasts go too, even when its log held nothing; a
	// failure leaves them to their age limit, and a delete sent again
	// purges them again.
	if err == nil || errors.Is(err, eventlog.ErrNothingToDelete) {
		if perr := h.purgeAgentEvents(ctx, agent); perr != nil {
			h.logger.Warn("delete: the agent's stored events stay until they age out", "agent", agent, "err", perr)
		}
	}
	switch {
	case errors.Is(err, eventlog.ErrNothingToDelete):
		return nil, fmt.Errorf("%w: %w", ErrNotFound, err)
	case err != nil:
		return nil, err
	}
	if err := h.deps.Views.WaitFor(ctx, d.Seq); err != nil {
		return nil, err
	}
	if !d.Again {
		h.deleted.Inc()
	}
	if after != nil {
		after(ctx)
	}
	return DeleteReply{Agent: agent, Deleted: true, Tombstone: d.Seq, Again: d.Again}, nil
}

// quiesce waits until no command uses inst any more, then stops it without
// compacting it: its fibers are interrupted (their rows go with the
// agent's).
func (h *Host) quiesce(ctx context.Context, inst *instance) error {
	select {
	case <-inst.built:
	case <-ctx.Done():
		return ErrUnavailable.Wrapf("%w (waiting for agent %s to be built)", ctx.Err(), inst.id)
	}
	if inst.err != nil {
		return nil
	}
	for {
		h.mu.Lock()
		busy := inst.inflight
		h.mu.Unlock()
		if busy == 0 {
			break
		}
		select {
		case <-time.After(10 * time.Millisecond):
		case <-ctx.Done():
			return ErrUnavailable.Wrapf("%w (waiting for %d commands of agent %s)", ctx.Err(), busy, inst.id)
		}
	}
	h.stop(inst)
	return nil
}

// isDeleting reports whether a delete of agent runs on this node.
func (h *Host) isDeleting(agent string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.mu.deleting[agent]
}

// Serves reports whether this node runs agent's background work now: it
// owns the agent's partition (Owns) and is not deleting it. The
// compactor, the scheduler and chunk retention take it as their Owns.
func (h *Host) Serves(agent string) bool {
	return h.Owns(agent) && !h.isDeleting(agent)
}
