package chat

import (
	"sync"
	"sync/atomic"

	"github.com/forever-agents/forever/eventlog"
)

// maxUnsetFlags bounds flagCache's map; past it the map starts over.
const maxUnsetFlags = 1 << 16

// flagCache answers Store.Interrupted without a Pebble read for a flag a
// read found unset, for as long as no flag can have been set since.
// Interrupted runs at every delta of a turn, and a flag is almost never
// set.
//
// gen counts the commits of the interrupts view that may have set a flag:
// the Apply of an interrupt.set, and of a snapshot part (a compaction's
// rows, set without an interrupt.set) bump it after their batch is
// committed (eventlog.Batch.AfterCommit), before a WaitFor of their
// sequence returns. A read that finds a flag unset records gen as it was
// before the read; the flag is known unset while gen has not moved. If a
// set committed after that read, its bump comes after the commit, so
// gen has moved by the next check, which reads the view again. A set
// that a WaitFor confirmed (SetInterrupt returns after one) is therefore
// seen by every check that starts after it. Rows that go (a clear, a
// tombstone, a dropped view) only make a flag unset, and a set flag is
// never cached.
type flagCache struct {
	gen   atomic.Uint64
	mu    sync.Mutex
	unset map[flagKey]uint64 // gen+1 when the flag was read unset
}

type flagKey struct{ agent, name string }

func newFlagCache() *flagCache { return &flagCache{unset: map[flagKey]uint64{}} }

// changed records that a flag may have been set: call it after the
// commit (eventlog.Batch.AfterCommit).
func (c *flagCache) changed() { c.gen.Add(1) }

// knownUnset reports whether agent's flag name was read unset at gen g.
func (c *flagCache) knownUnset(agent, name string, g uint64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.unset[flagKey{agent, name}] == g+1
}

// readUnset records that a read that started at gen g found the flag unset.
func (c *flagCache) readUnset(agent, name string, g uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.unset) >= maxUnsetFlags {
		clear(c.unset)
	}
	c.unset[flagKey{agent, name}] = g + 1
}

// afterSet is the Apply hook of the interrupts view for c: e may set a
// flag (an interrupt.set, a snapshot part), so c learns of it once b is
// committed.
func (c *flagCache) afterSet(b *eventlog.Batch, e eventlog.Event) {
	if e.Type == EventInterruptSet || e.Type == eventlog.TypeSnapshot {
		b.AfterCommit(c.changed)
	}
}
