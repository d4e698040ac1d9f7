package ownership

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go/jetstream"
)

// Record formats. The cluster writes one format of stored records at a
// time, its active format; each node announces the highest it reads in its
// node key. A release that adds a kind of record reads it at once but
// writes it only after Activate raised the active format, which it does
// only once every live node reads it, and the raise is kept in the
// partitions bucket, so it holds across restarts and is never undone:
// the way CockroachDB's cluster versions gate a new on-disk format behind
// a rolling upgrade, so that one release both adds and starts writing it.
//
// A node whose release cannot read the active format refuses to start
// (New), and a running one that finds the format raised past it stops
// (Run returns ErrFormatTooNew): it would misread what the others write.
const (
	// FormatBase is the format of every release before formats were
	// announced: a node key without "reads" reads this one.
	FormatBase = 1
	// keyFormat is the active format's key in the partitions bucket;
	// absent means FormatBase.
	keyFormat = "config.format"
)

// Errors of the record format.
var (
	// ErrFormatTooNew: the cluster writes a record format this node's
	// release cannot read (New, Run).
	ErrFormatTooNew = errors.New("ownership: the cluster writes a record format this node cannot read")
	// ErrFormatNotReady: Activate was asked for a format a live node does
	// not read yet.
	ErrFormatNotReady = errors.New("ownership: a live node does not read that record format yet")
)

// nodeValue is what a node key holds: when the node started, the
// highest record format it reads, and whether it announces the partitions
// it is ready to be handed, and which (warm.go).
type nodeValue struct {
	Started string `json:"started,omitempty"`
	Reads   int    `json:"reads,omitempty"`
	Warms   bool   `json:"warms,omitempty"`
	Warm    []int  `json:"warm,omitempty"`
	// Leaving: the node is stopping and hands its partitions off as their
	// receivers announce them warm (drain.go). An earlier release ignores
	// it and counts the node live until its key goes, as before.
	Leaving bool `json:"leaving,omitempty"`
	// Drains: the node knows Leaving, so it prepares a leaving node's
	// partitions; one that does not (an earlier release) is handed them
	// at once.
	Drains bool `json:"drains,omitempty"`
}

// decodeNodeValue decodes a node key's value; the zero nodeValue when it
// does not decode.
func decodeNodeValue(value []byte) nodeValue {
	var v nodeValue
	if json.Unmarshal(value, &v) != nil {
		return nodeValue{}
	}
	return v
}

// reads returns the format a node key's value announces.
func (v nodeValue) reads() int {
	if v.Reads < FormatBase {
		return FormatBase
	}
	return v.Reads
}

// FormatInfo is the cluster's record format as this node sees it.
type FormatInfo struct {
	// Active is the format every node writes.
	Active int `json:"active"`
	// Reads is the highest format this node reads.
	Reads int `json:"reads"`
	// Nodes is what each live node announces it reads.
	Nodes map[string]int `json:"nodes"`
	// Ready is the highest format every live node reads: Activate may
	// raise Active to it.
	Ready int `json:"ready"`
}

// activeFormat reads the active format and its revision (0: never set).
func (m *Manager) activeFormat(ctx context.Context) (int, uint64, error) {
	n, rev, err := storedInt(ctx, m.parts, keyFormat, "record format", "format number", FormatBase)
	switch {
	case err != nil:
		return 0, 0, err
	case rev == 0:
		return FormatBase, 0, nil
	}
	return n, rev, nil
}

// storedInt reads the number stored at key of kv (the what of the
// cluster, a kind of at least least) and its revision: 0 and 0 when none
// is stored.
func storedInt(ctx context.Context, kv jetstream.KeyValue, key, what, kind string, least int) (int, uint64, error) {
	e, err := kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return 0, 0, nil
	}
	if err != nil {
		return 0, 0, fmt.Errorf("ownership: read the %s: %w", what, err)
	}
	n, err := strconv.Atoi(string(e.Value()))
	if err != nil || n < least {
		return 0, 0, fmt.Errorf("ownership: the stored %s %q is not a %s", what, e.Value(), kind)
	}
	return n, e.Revision(), nil
}

// checkFormat refuses a node whose release cannot read the active format.
func (m *Manager) checkFormat(ctx context.Context) error {
	active, _, err := m.activeFormat(ctx)
	if err != nil {
		return err
	}
	m.noteActive(active)
	if active > m.cfg.Format {
		return fmt.Errorf("%w: the cluster writes record format %d and this release reads up to %d; run a release that reads it",
			ErrFormatTooNew, active, m.cfg.Format)
	}
	return nil
}

// Formats returns the active format and what each live node reads.
func (m *Manager) Formats(ctx context.Context) (FormatInfo, error) {
	active, _, err := m.activeFormat(ctx)
	if err != nil {
		return FormatInfo{}, err
	}
	info := FormatInfo{Active: active, Reads: m.cfg.Format, Nodes: m.liveReads()}
	info.Ready = m.cfg.Format
	for _, r := range info.Nodes {
		info.Ready = min(info.Ready, r)
	}
	return info, nil
}

// liveReads returns the format each live node reads, this one included.
func (m *Manager) liveReads() map[string]int {
	out := map[string]int{m.cfg.Node: m.cfg.Format}
	for _, n := range m.NodeInfos() {
		if !n.Live || n.Name == m.cfg.Node {
			continue
		}
		m.mu.Lock()
		r, ok := m.mu.reads[n.Name]
		m.mu.Unlock()
		if !ok {
			r = FormatBase
		}
		out[n.Name] = r
	}
	return out
}

// Activate raises the active format to n once every live node reads it,
// and returns the active format. A lower or equal n changes nothing: the
// format never goes back. Errors: ErrFormatNotReady naming a node that
// does not read n; a write that lost a race is retried by the caller.
func (m *Manager) Activate(ctx context.Context, n int) (int, error) {
	active, rev, err := m.activeFormat(ctx)
	if err != nil {
		return 0, err
	}
	if n <= active {
		return active, nil
	}
	for node, r := range m.liveReads() {
		if r < n {
			return active, fmt.Errorf("%w: node %s reads up to record format %d, not %d; upgrade it first", ErrFormatNotReady, node, r, n)
		}
	}
	v := []byte(strconv.Itoa(n))
	if rev == 0 {
		_, err = m.parts.Create(ctx, keyFormat, v)
	} else {
		_, err = m.parts.Update(ctx, keyFormat, v, rev)
	}
	if err != nil {
		return active, fmt.Errorf("ownership: raise the record format to %d: %w", n, err)
	}
	m.log.Info("record format raised", "from", active, "to", n)
	m.noteActive(n)
	return n, nil
}

// ActiveFormat returns the cluster's active record format as this node
// last read it (at New, then after each heartbeat), without I/O: a
// writer of a record format newer than FormatBase checks it before each
// such write. It only grows.
func (m *Manager) ActiveFormat() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return max(m.mu.active, FormatBase)
}

// noteActive remembers active as the format last read; a format never
// goes back, so a stale read leaves a newer one in place.
func (m *Manager) noteActive(active int) {
	m.mu.Lock()
	m.mu.active = max(m.mu.active, active)
	m.mu.Unlock()
}

// formatBehind checks, after a heartbeat, that this node still reads the
// active format, and remembers the format when it does not. With
// AutoActivate it raises the format once every live node reads a higher
// one this node reads too.
func (m *Manager) formatBehind(ctx context.Context) {
	active, _, err := m.activeFormat(ctx)
	if err != nil {
		return
	}
	if active > m.cfg.Format {
		m.mu.Lock()
		m.mu.behind = active
		m.mu.Unlock()
		return
	}
	if m.cfg.AutoActivate && active < m.cfg.Format {
		// Run's rounds begin once the first watch brought every node key
		// in, so a node that just started sees the live nodes it joins.
		ready := m.cfg.Format
		for _, r := range m.liveReads() {
			ready = min(ready, r)
		}
		if ready > active {
			// Another node raising it at the same time wins the race;
			// the next heartbeat reads what it wrote.
			if n, err := m.Activate(ctx, ready); err == nil {
				active = n
			} else {
				m.log.Debug("record format not raised", "to", ready, "err", err)
			}
		}
	}
	m.noteActive(active)
}

// behindErr returns ErrFormatTooNew once a heartbeat found the active
// format past this node's, else nil.
func (m *Manager) behindErr() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.mu.behind == 0 {
		return nil
	}
	return fmt.Errorf("%w: the cluster raised the record format to %d and this release reads up to %d; this node stops serving: run a release that reads it",
		ErrFormatTooNew, m.mu.behind, m.cfg.Format)
}
