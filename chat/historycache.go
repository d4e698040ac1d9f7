package chat

import (
	"bytes"
	"container/list"
	"sync"
	"sync/atomic"
)

// historyCacheBytes bounds a Store's history cache: the raw rows it keeps
// (the decoded messages cost about as much again), over every agent.
const historyCacheBytes = 32 << 20

// historyCache keeps, for the agents whose History was read last, each of
// their own message rows as stored (its raw JSON) beside the Message
// decoded from it, so the History before every model call decodes only
// the rows that changed since the last one: the new messages, and the
// assistant message the turn updates.
//
// It is keyed by the row's bytes, not by a cursor: History still scans the
// agent's rows and takes a cached Message only for a row whose bytes equal
// the ones it was decoded from. Decoding is a function of those bytes, so
// a hit is exactly what decoding them again gives, whatever changed the
// rows meanwhile (an append, an edit, a truncation or rollback, a
// compaction's snapshot, a fork, a tombstone, a rebuilt view, another node
// applying the agent's events after a move) and with no hook into the
// views' writers to forget. A row stored in pieces or inherited from a
// fork's parent is read as before, never cached.
//
// It is safe for concurrent use. Entries are never changed once stored:
// History builds a new one and swaps it in, so a reader holding an old
// entry reads it unlocked. The Messages it hands out share their parts'
// bytes (Input, Output) with the cache: History's callers read them.
type historyCache struct {
	mu     sync.Mutex
	max    int
	size   int
	lru    list.List // of *historyEntry, most recently used first
	agents map[string]*list.Element
	hits   atomic.Uint64 // rows taken from the cache (tests)
}

// historyEntry is one agent's cached rows, by message index.
type historyEntry struct {
	agent string
	rows  []cachedRow
	size  int
}

// cachedRow is one own message row: its raw JSON and the Message decoded
// from it. raw is nil for an index that has no cacheable row.
type cachedRow struct {
	raw []byte
	m   Message
}

func newHistoryCache(max int) *historyCache {
	return &historyCache{max: max, agents: map[string]*list.Element{}}
}

// get returns agent's cached rows (nil if none). The caller only reads
// them.
func (c *historyCache) get(agent string) []cachedRow {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.agents[agent]
	if !ok {
		return nil
	}
	c.lru.MoveToFront(el)
	return el.Value.(*historyEntry).rows
}

// put replaces agent's cached rows with rows, evicting the least recently
// used agents while the cache is over its bound. rows is the cache's from
// now on.
func (c *historyCache) put(agent string, rows []cachedRow) {
	size := 0
	for _, r := range rows {
		size += 2 * len(r.raw) // the decoded message about as much again
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.agents[agent]; ok {
		c.size -= el.Value.(*historyEntry).size
		c.lru.Remove(el)
		delete(c.agents, agent)
	}
	if size > c.max {
		return // one conversation larger than the whole cache: not kept
	}
	c.agents[agent] = c.lru.PushFront(&historyEntry{agent: agent, rows: rows, size: size})
	c.size += size
	for c.size > c.max {
		el := c.lru.Back()
		e := el.Value.(*historyEntry)
		c.lru.Remove(el)
		delete(c.agents, e.agent)
		c.size -= e.size
	}
}

// lookup returns the Message cached for index i when it was decoded from
// exactly raw.
func lookup(rows []cachedRow, i uint64, raw []byte) (Message, bool) {
	if i >= uint64(len(rows)) || rows[i].raw == nil || !bytes.Equal(rows[i].raw, raw) {
		return Message{}, false
	}
	return rows[i].m, true
}
