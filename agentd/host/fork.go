package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/forever-agents/forever/eventlog"
)

// Fork: the fork verb (forever.cmd.<parent>.fork, {"to","at"}) makes a new
// agent, to, whose conversation is its parent's up to message at (all of
// it for at ""). The new agent's log starts with one eventlog.TypeForked
// event naming the parent, the parent's last sequence and the cut; the
// parent's events and chunks are not copied. The type's views resolve the
// inherited prefix (chat's messages view reads it from the parent's rows,
// which copy a row into their forks before they rewrite it). The fork
// lives where its own id's partition does: the node that takes the
// command routes it to the fork's owner, which checks the parent in its
// views (every node holds every agent's) and appends the event there,
// fenced.
//
// Deleting or compacting the parent must not break a fork whose log still
// names it: the parent's owner first has each such fork compacted by the
// fork's owner (detach), so the fork's snapshot holds its whole
// conversation and its agent.forked event is purged; then the parent goes
// (or is compacted). A fork made on another node while its parent is
// being deleted must not miss the detach: the delete first appends
// agent.deleting (TypeDeleting) to the parent's log, then lists the forks;
// a fork, once its agent.forked is stored, reads the parent's log after
// the sequence it forked at. One of the two comes first in the events
// stream: the fork is listed and detached, or it finds the intent (or the
// tombstone) and deletes itself, answering 409. A fork that answered is
// whole after its parent's delete (TestForkParentDeletedMeanwhile).

// ForkRequest is the payload of the fork verb.
type ForkRequest struct {
	// To is the new agent's id; it must have no event yet and be of the
	// parent's type.
	To string `json:"to"`
	// At is the id of the parent's message the fork's conversation ends
	// with; "" forks the whole conversation.
	At string `json:"at,omitempty"`
}

// ForkReply is the reply of the fork verb.
type ForkReply struct {
	Agent  string `json:"agent"`
	Parent string `json:"parent"`
	At     string `json:"at,omitempty"`
	// Upto is the sequence of the parent's last event when it was forked;
	// Seq that of the fork's agent.forked event.
	Upto eventlog.Seq `json:"upto"`
	Seq  eventlog.Seq `json:"seq"`
	// Messages is how many messages the fork inherited.
	Messages uint64 `json:"messages"`
}

// Forking is a type's part of the fork verb (SetForking).
type Forking struct {
	// Point returns how many messages of parent's conversation a fork at
	// message id at inherits (every message for at ""); a message the
	// parent does not have is an error wrapping ErrBadRequest.
	Point func(ctx context.Context, parent, at string) (uint64, error)
	// Forks returns the agents forked from parent.
	Forks func(parent string) ([]ForkRef, error)
}

// ForkRef names an agent forked from another, and the sequence of its
// agent.forked event.
type ForkRef struct {
	Agent string
	Seq   eventlog.Seq
}

// SetForking sets TypeSpec.Forking of a type registered before: how its
// agents are forked. A type without it forks with nothing inherited but
// the reference, and refuses an at. Kept for programs that register in
// several calls. Call it before the daemon starts.
func (h *Host) SetForking(typ string, f Forking) error {
	return h.amend(typ, f.Point != nil && f.Forks != nil, "forking of agent type %q: register the type first, with both functions", func() error {
		h.forking[typ] = f
		return nil
	})
}

// forkOrder is what the node that took a fork sends the fork's owner, on
// the fork's own id: make the fork, or (Detach) compact it so that it no
// longer needs its parent's history.
type forkOrder struct {
	Parent string `json:"parent"`
	At     string `json:"at,omitempty"`
	Detach bool   `json:"detach,omitempty"`
}

// quotaAgent is the agent a command counts against the agents quota as:
// its own, or for a fork the new agent it makes.
func quotaAgent(cmd Command) string {
	if cmd.Verb != "fork" {
		return cmd.Agent
	}
	var req ForkRequest
	if json.Unmarshal(cmd.Data, &req) != nil || !eventlog.ValidToken(req.To) {
		return cmd.Agent
	}
	return req.To
}

// forkHere carries out a forkOrder on the owner of cmd.Agent, the fork.
func (h *Host) forkHere(ctx context.Context, cmd Command) (any, error) {
	var o forkOrder
	if err := json.Unmarshal(cmd.Data, &o); err != nil || !eventlog.ValidToken(o.Parent) {
		return nil, ErrBadRequest.Wrapf("fork: the order for %q names no parent", cmd.Agent)
	}
	if o.Detach {
		return nil, h.detachHere(ctx, cmd.Agent)
	}
	fork, parent := cmd.Agent, o.Parent
	if h.isDeleting(fork) {
		return nil, ErrConflict.Wrapf("agent %q is being deleted", fork)
	}
	if pf, pp := h.partitionOf(fork), h.partitionOf(parent); h.deps.Log.OwnedViews() && pf != pp {
		// A fork reads its parent's rows in its owner's views, which
		// hold the fork's partition only.
		return nil, ErrBadRequest.Wrapf("fork: %q is in partition %d and its parent %q in %d; with owned views (a sharded cluster's default) a fork must be in its parent's partition, or every node must run with --owned-views=false", fork, pf, parent, pp)
	}
	if err := h.catchUpViews(ctx, parent); err != nil {
		return nil, err
	}
	if _, ok, err := h.agents.Get(parent, h.Types()); err != nil {
		return nil, err
	} else if !ok {
		return nil, ErrNotFound.Wrapf("agent %q does not exist: there is nothing to fork", parent)
	}
	upto, err := h.deps.Log.LastSeq(ctx, eventlog.Filter{Agent: parent})
	if err != nil {
		return nil, err
	}
	typ, err := h.TypeOf(fork)
	if err != nil {
		return nil, err
	}
	var n uint64
	if f, ok := h.forking[typ]; ok {
		if n, err = f.Point(ctx, parent, o.At); err != nil {
			return nil, err
		}
	} else if o.At != "" {
		return nil, ErrBadRequest.Wrapf("fork: agents of type %s have no messages to fork at; leave at empty", typ)
	}
	last, err := h.deps.Log.LastSeq(ctx, eventlog.Filter{Agent: fork})
	if err != nil {
		return nil, err
	}
	if last > 0 {
		if err := h.deps.Views.WaitFor(ctx, last); err != nil {
			return nil, err
		}
		if _, ok, err := h.agents.Get(fork, h.Types()); err != nil {
			return nil, err
		} else if ok {
			return nil, h.forkExists(fork)
		}
	}
	e, err := eventlog.NewEvent(fork, eventlog.TypeForked, eventlog.Forked{Parent: parent, Upto: upto, At: o.At, Messages: n})
	if err != nil {
		return nil, err
	}
	seq, err := h.deps.Log.Writer(fork).Append(ctx, e, eventlog.ExpectSeq(last))
	if errors.Is(err, eventlog.ErrConflict) {
		return nil, h.forkExists(fork)
	}
	if err != nil {
		return nil, fmt.Errorf("fork %s from %s: %w", fork, parent, err)
	}
	if err := h.deps.Views.WaitFor(ctx, seq); err != nil {
		return nil, err
	}
	if err := h.forkRaced(ctx, fork, parent, upto); err != nil {
		return nil, err
	}
	return ForkReply{Agent: fork, Parent: parent, At: o.At, Upto: upto, Seq: seq, Messages: n}, nil
}

func (h *Host) forkExists(fork string) error {
	return ErrConflict.Wrapf("agent %q already exists: a fork needs a new agent id (choose another, or delete that agent first)", fork)
}

// detachForks has every fork of parent whose log still starts with its
// agent.forked event compacted by its owner, before parent's history
// leaves the log (a delete, a compaction): the forks then no longer need
// it, and a view rebuilt from the log finds their whole conversations in
// their snapshots. A fork compacted or deleted since it was made is
// passed over (its first event is after its agent.forked).
func (h *Host) detachForks(ctx context.Context, parent string) error {
	typ, err := h.TypeOf(parent)
	if err != nil {
		return err
	}
	f, ok := h.forking[typ]
	if !ok {
		return nil
	}
	// A fork's agent.forked is on the fork's subject, often appended by
	// another node: the views learn of the fork only once they applied
	// it, so they catch up with the whole events stream, not only with
	// the parent's subject.
	if h.deps.Log.Stalled() == nil {
		seq, err := h.deps.Log.LastSeq(ctx, eventlog.Filter{})
		if err != nil {
			return err
		}
		if err := h.deps.Views.WaitFor(ctx, seq); err != nil {
			return err
		}
	}
	forks, err := f.Forks(parent)
	if err != nil {
		return err
	}
	for _, fork := range forks {
		ends, _, err := h.deps.Log.Ends(ctx, eventlog.Filter{Agent: fork.Agent})
		if err != nil {
			return err
		}
		if len(ends) == 0 || ends[0].First.Seq == 0 || ends[0].First.Seq > fork.Seq {
			continue
		}
		data, err := json.Marshal(forkOrder{Parent: parent, Detach: true})
		if err != nil {
			return err
		}
		if _, err := h.route(ctx, Command{Agent: fork.Agent, Verb: "fork", Data: data}); err != nil {
			return fmt.Errorf("detach fork %s of %s: %w", fork.Agent, parent, err)
		}
	}
	return nil
}

// detachHere compacts fork on its owner (forkHere), once its own forks
// are detached: their logs read the history the compaction purges.
func (h *Host) detachHere(ctx context.Context, fork string) error {
	if err := h.detachForks(ctx, fork); err != nil {
		return err
	}
	var err error
	for try := 0; try < deleteTries; try++ {
		if _, err = h.deps.Log.Compact(ctx, fork); !errors.Is(err, eventlog.ErrConflict) {
			break
		}
	}
	if errors.Is(err, eventlog.ErrNothingToCompact) {
		return nil
	}
	return err
}

// TypeDeleting is the type of the event the delete verb appends to an
// agent's log before it lists the agent's forks: a fork stored after it
// may have been missed, and undoes itself.
const TypeDeleting = "agent.deleting"

// markDeleting appends agent.deleting to agent's log (deleteAgent), unless
// it has nothing stored or is deleted already: an intent must not make an
// agent of its own.
func (h *Host) markDeleting(ctx context.Context, agent string) error {
	last, ok, err := h.deps.Log.Last(ctx, eventlog.Filter{Agent: agent})
	if err != nil || !ok || last.Type == eventlog.TypeDeleted {
		return err
	}
	e, err := eventlog.NewEvent(agent, TypeDeleting, struct{}{})
	if err != nil {
		return err
	}
	if _, err := h.deps.Log.Writer(agent).Append(ctx, e); err != nil {
		return fmt.Errorf("delete %s: append %s: %w", agent, TypeDeleting, err)
	}
	return nil
}

// forkRaced reads parent's log after upto, the sequence fork was forked
// at, once fork's agent.forked is stored: a delete of parent that began
// meanwhile (agent.deleting, or its tombstone) may have listed the forks
// before this one, and purge what it inherited. The fork is then deleted
// and the command answered ErrConflict.
func (h *Host) forkRaced(ctx context.Context, fork, parent string, upto eventlog.Seq) error {
	after := upto
	for {
		evs, err := h.deps.Log.Read(ctx, eventlog.Filter{Agent: parent}, after, 256)
		if err != nil {
			return fmt.Errorf("fork %s from %s: read the parent's log: %w", fork, parent, err)
		}
		for _, e := range evs {
			if e.Type == TypeDeleting || e.Type == eventlog.TypeDeleted {
				return h.undoFork(ctx, fork, parent)
			}
		}
		if len(evs) < 256 {
			return nil
		}
		after = evs[len(evs)-1].Seq
	}
}

// undoFork deletes fork, whose parent is being deleted.
func (h *Host) undoFork(ctx context.Context, fork, parent string) error {
	h.logger.Warn("fork undone: its parent is being deleted", "fork", fork, "parent", parent)
	var err error
	var d eventlog.Deleted
	for try := 0; try < deleteTries; try++ {
		if d, err = h.deps.Log.Delete(ctx, fork); !errors.Is(err, eventlog.ErrConflict) {
			break
		}
	}
	if err == nil {
		err = h.deps.Views.WaitFor(ctx, d.Seq)
	}
	if err != nil {
		return fmt.Errorf("fork %s from %s: its parent is being deleted, and deleting the fork failed (delete it): %w", fork, parent, err)
	}
	return fmt.Errorf("%w: agent %q was being deleted while it was forked to %q; the fork was undone", ErrConflict, parent, fork)
}
