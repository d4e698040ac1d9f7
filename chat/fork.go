package chat

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"iter"
	"strings"

	"github.com/forever-agents/forever/eventlog"
)

// A fork (eventlog.TypeForked) shares its parent's history by reference:
// its log starts with one agent.forked event, and the messages view keeps
// a reference too. Applying agent.forked writes two rows, whatever the
// parent's length: the fork's base, b\0<fork> = {parent, n}, and in the
// parent's rows F\0<parent>\0<fork> (the event's sequence and n). The fork's
// conversation is positions 0..n-1 resolved through its parent (and the
// parent's parent, for a fork of a fork), then its own messages from
// position n on. Reads (getMessage, messageIndex) take a position from the
// fork's own rows when it has one, else from the parent's.
//
// The parent's rows below n may change later (a message's parts replaced,
// a truncation by a rollback): before the parent's Apply changes a row a
// fork still reads, it copies that row into the fork's own rows
// (copyOnWrite), so the fork keeps what it inherited. The cost of a fork
// is then a few rows; what a parent's rewrite costs grows with its forks.
//
// The view is a function of the log as long as the parent's history before
// the fork is in it: before the parent's history leaves the log (its
// compaction, its delete) agentd compacts each fork, and a fork's snapshot
// holds its inherited messages as its own rows (messagesAgentRows).

// maxForkDepth bounds the chain a read follows (a fork of a fork of ...).
const maxForkDepth = 64

func forkBaseKey(agent string) []byte    { return []byte("b\x00" + agent) }
func forkKey(parent, fork string) []byte { return []byte("F\x00" + parent + "\x00" + fork) }
func forkPrefix(parent string) []byte    { return []byte("F\x00" + parent + "\x00") }

// forkBase is a fork's reference to its parent: positions below N are
// the parent's.
type forkBase struct {
	Parent string `json:"parent"`
	N      uint64 `json:"n"`
}

func getBase(g getter, agent string) (forkBase, bool, error) {
	var b forkBase
	ok, err := getJSON(g, forkBaseKey(agent), &b)
	return b, ok && b.Parent != "", err
}

func encodeForkRow(seq eventlog.Seq, n uint64) []byte {
	return binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(nil, uint64(seq)), n)
}

func decodeForkRow(b []byte) (eventlog.Seq, uint64, bool) {
	if len(b) != 16 {
		return 0, 0, false
	}
	return eventlog.Seq(binary.BigEndian.Uint64(b)), binary.BigEndian.Uint64(b[8:]), true
}

// applyForked records a fork's reference to its parent.
func applyForked(b *eventlog.Batch, e eventlog.Event) error {
	var f eventlog.Forked
	if !decodeData(e, &f) || !eventlog.ValidToken(f.Parent) || f.Parent == e.Agent {
		return nil
	}
	if err := setJSON(b, forkBaseKey(e.Agent), forkBase{Parent: f.Parent, N: f.Messages}); err != nil {
		return err
	}
	if err := b.Set(msgNextKey(e.Agent), encodeIndex(f.Messages)); err != nil {
		return err
	}
	return b.Set(forkKey(f.Parent, e.Agent), encodeForkRow(e.Seq, f.Messages))
}

// ownerOf returns the agent whose own rows hold position idx of agent's
// conversation: agent itself, or an ancestor it inherited it from.
func ownerOf(g getter, agent string, idx uint64) (string, bool, error) {
	for range maxForkDepth {
		if _, err := g.Get(msgKey(agent, idx)); err == nil {
			return agent, true, nil
		} else if !isNotFound(err) {
			return "", false, err
		}
		base, ok, err := getBase(g, agent)
		if err != nil || !ok || idx >= base.N {
			return "", false, err
		}
		agent = base.Parent
	}
	return "", false, nil
}

// getMessage reads the message at idx of agent's conversation, its own or
// inherited; pieces is the pieces of the row it was read from. It walks
// the ancestors as ownerOf does, reading each row once: History reads
// every message of the conversation before each model call, and a Get
// to find the owner and another to read the row were 10% of a tool
// call's CPU at 100 agents (docs/benchmarks.md, "What bounds 100 agents").
func getMessage(g getter, agent string, idx uint64) (Message, int, bool, error) {
	for range maxForkDepth {
		m, pieces, ok, err := getOwnMessage(g, agent, idx)
		if err != nil || ok {
			return m, pieces, ok, err
		}
		base, ok, err := getBase(g, agent)
		if err != nil || !ok || idx >= base.N {
			return Message{}, 0, false, err
		}
		agent = base.Parent
	}
	return Message{}, 0, false, nil
}

// messageIndex returns the position of message id in agent's
// conversation, its own or inherited.
func messageIndex(g getter, agent, id string) (uint64, bool, error) {
	return messageIndexDepth(g, agent, id, 0)
}

func messageIndexDepth(g getter, agent, id string, depth int) (uint64, bool, error) {
	idx, ok, err := ownMessageIndex(g, agent, id)
	if err != nil || ok || depth >= maxForkDepth {
		return idx, ok, err
	}
	base, ok, err := getBase(g, agent)
	if err != nil || !ok {
		return 0, false, err
	}
	idx, ok, err = messageIndexDepth(g, base.Parent, id, depth+1)
	if err != nil || !ok || idx >= base.N {
		return 0, false, err
	}
	// The parent's row there may have been replaced since (the fork then
	// holds its own copy): the position is the fork's only if the
	// message there is that one.
	m, _, ok, err := getMessage(g, agent, idx)
	if err != nil || !ok || m.ID != id {
		return 0, false, err
	}
	return idx, true, nil
}

// copyOnWrite gives every fork of agent that still reads positions
// from..to-1 from agent its own copy of them, before agent's rows there
// change.
func copyOnWrite(b *eventlog.Batch, agent string, from, to uint64) error {
	if from >= to {
		return nil
	}
	pre := forkPrefix(agent)
	var forks []string
	var ns []uint64
	for kv, err := range b.Scan(pre) {
		if err != nil {
			return err
		}
		_, n, ok := decodeForkRow(kv.Value)
		if fork, found := strings.CutPrefix(string(kv.Key), string(pre)); found && ok && n > from {
			forks, ns = append(forks, fork), append(ns, n)
		}
	}
	for k, fork := range forks {
		base, ok, err := getBase(b, fork)
		if err != nil {
			return err
		}
		if !ok || base.Parent != agent {
			continue // deleted, or a later life of the id
		}
		for i := from; i < min(to, ns[k], base.N); i++ {
			if _, err := b.Get(msgKey(fork, i)); err == nil {
				continue // the fork's own already
			} else if !isNotFound(err) {
				return err
			}
			m, _, ok, err := getMessage(b, agent, i)
			if err != nil {
				return err
			}
			if !ok {
				continue
			}
			if err := putMessage(b, fork, i, m, 0); err != nil {
				return err
			}
			if err := b.Set(msgIDKey(fork, m.ID), encodeIndex(i)); err != nil {
				return err
			}
		}
	}
	return nil
}

// cutInherited shortens what agent inherits to positions below keep,
// when its conversation is truncated there.
func cutInherited(b *eventlog.Batch, agent string, keep uint64) error {
	base, ok, err := getBase(b, agent)
	if err != nil || !ok || base.N <= keep {
		return err
	}
	base.N = keep
	return setJSON(b, forkBaseKey(agent), base)
}

// messagesAgentRows is the messages view's AgentRows: the agent's own rows
// and, for a fork, its inherited messages as rows of its own, so that a
// fork's snapshot holds its whole conversation and needs its parent no
// more.
func messagesAgentRows(r eventlog.Reader, agent string) iter.Seq2[eventlog.KV, error] {
	own := agentRows(keys(msgNextKey, forkBaseKey), prefixes("m", "i", "x", "q", "F"))(r, agent)
	return func(yield func(eventlog.KV, error) bool) {
		for kv, err := range own {
			if !yield(kv, err) || err != nil {
				return
			}
		}
		base, ok, err := getBase(r, agent)
		if err != nil {
			yield(eventlog.KV{}, err)
			return
		}
		if !ok {
			return
		}
		// The parent's row naming this fork goes with the fork (its
		// delete removes it).
		if v, err := r.Get(forkKey(base.Parent, agent)); err == nil {
			if !yield(eventlog.KV{Key: forkKey(base.Parent, agent), Value: v}, nil) {
				return
			}
		} else if !isNotFound(err) {
			yield(eventlog.KV{}, err)
			return
		}
		for i := range base.N {
			if _, err := r.Get(msgKey(agent, i)); err == nil {
				continue // its own row, yielded above
			} else if !isNotFound(err) {
				yield(eventlog.KV{}, err)
				return
			}
			owner, ok, err := ownerOf(r, base.Parent, i)
			if err != nil {
				yield(eventlog.KV{}, err)
				return
			}
			if !ok {
				continue
			}
			head, err := r.Get(msgKey(owner, i))
			if err != nil {
				yield(eventlog.KV{}, err)
				return
			}
			var row messageRow
			if err := json.Unmarshal(head, &row); err != nil {
				yield(eventlog.KV{}, corrupt("message row of "+owner, err))
				return
			}
			if !yield(eventlog.KV{Key: msgKey(agent, i), Value: head}, nil) {
				return
			}
			for k := range row.Pieces {
				piece, err := r.Get(pieceKey(owner, i, k))
				if err != nil {
					yield(eventlog.KV{}, corrupt(fmt.Sprintf("piece %d of message %q of %s", k, row.ID, owner), err))
					return
				}
				if !yield(eventlog.KV{Key: pieceKey(agent, i, k), Value: piece}, nil) {
					return
				}
			}
			if !yield(eventlog.KV{Key: msgIDKey(agent, row.ID), Value: encodeIndex(i)}, nil) {
				return
			}
		}
	}
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

// Forks returns the agents forked from parent that the messages view
// knows, ordered by id.
func (s *Store) Forks(parent string) ([]Fork, error) {
	var out []Fork
	pre := forkPrefix(parent)
	for kv, err := range s.messages.Scan(pre) {
		if err != nil {
			return nil, err
		}
		id, ok := strings.CutPrefix(string(kv.Key), string(pre))
		seq, _, ok16 := decodeForkRow(kv.Value)
		if !ok || id == "" || !ok16 {
			continue
		}
		out = append(out, Fork{Agent: id, Seq: seq})
	}
	return out, nil
}
