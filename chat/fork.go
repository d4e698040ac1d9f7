package chat

import (
	"fmt"
	"strings"

	"github.com/forever-agents/forever/eventlog"
)

// A fork (eventlog.TypeForked) shares its parent's history by reference in
// the log: its own log starts with the one agent.forked event. The messages
// view resolves the inherited prefix when it applies that event: it copies
// the parent's first Forked.Messages messages, as the view holds them at
// that point of the log, under the fork's keys. The copy is bounded by the
// parent's messages, never by its events, and is deterministic: the view
// applies the events stream in order, so on a rebuild the parent's rows are
// again what they were when the fork was made, as long as the parent's
// history before the fork is in the log. Before the parent's history
// leaves the log (its delete), agentd compacts each of its forks, whose
// snapshot then holds the whole conversation (agentd/host's fork.go).
//
// The parent also keeps one row per fork, F\0<parent>\0<fork> (the
// sequence of its agent.forked event), so that whoever deletes the parent
// can find its forks.

func forkKey(parent, fork string) []byte { return []byte("F\x00" + parent + "\x00" + fork) }
func forkPrefix(parent string) []byte    { return []byte("F\x00" + parent + "\x00") }

// applyForked copies the inherited messages of a fork into its rows.
func applyForked(b *eventlog.Batch, e eventlog.Event) error {
	var f eventlog.Forked
	if !decodeData(e, &f) || !eventlog.ValidToken(f.Parent) || f.Parent == e.Agent {
		return nil
	}
	next, err := nextIndex(b, f.Parent)
	if err != nil {
		return err
	}
	n := min(f.Messages, next)
	for i := range n {
		m, _, ok, err := getMessage(b, f.Parent, i)
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		if err := putMessage(b, e.Agent, i, m, 0); err != nil {
			return err
		}
		if err := b.Set(msgIDKey(e.Agent, m.ID), encodeIndex(i)); err != nil {
			return err
		}
	}
	if err := b.Set(msgNextKey(e.Agent), encodeIndex(f.Messages)); err != nil {
		return err
	}
	return b.Set(forkKey(f.Parent, e.Agent), encodeIndex(uint64(e.Seq)))
}

// ForkPoint returns how many messages of parent's conversation a fork at
// message id at inherits: the position of at plus one, or every message
// for at "". A parent without that message is ErrNotFound.
func (s *Store) ForkPoint(parent, at string) (uint64, error) {
	if at == "" {
		return nextIndex(s.messages, parent)
	}
	idx, ok, err := messageIndex(s.messages, parent, at)
	if err != nil {
		return 0, err
	}
	if !ok {
		return 0, fmt.Errorf("%w: agent %s has no message %q to fork at", ErrNotFound, parent, at)
	}
	return idx + 1, nil
}

// Fork names an agent forked from another, and the sequence of its
// agent.forked event.
type Fork struct {
	Agent string
	Seq   eventlog.Seq
}

// Forks returns the agents forked from parent, as the messages view knows
// them (a fork deleted since is still named), ordered by id.
func (s *Store) Forks(parent string) ([]Fork, error) {
	var out []Fork
	pre := forkPrefix(parent)
	for kv, err := range s.messages.Scan(pre) {
		if err != nil {
			return nil, err
		}
		id, ok := strings.CutPrefix(string(kv.Key), string(pre))
		seq, ok8 := decodeIndex(kv.Value)
		if !ok || id == "" || !ok8 {
			continue
		}
		out = append(out, Fork{Agent: id, Seq: eventlog.Seq(seq)})
	}
	return out, nil
}
