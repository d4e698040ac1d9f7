package main

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/forever-agents/forever/internal/stalls"
)

// The stall agents' events are read while the run goes on, not once
// after each kill. agentd compacts a stall agent every 15-30 s (by its
// size), and a compaction purges the events before its snapshot: read
// once per kill, most agents had no event left from before the kill by
// the read, and a run measured 13-62 of its 240 agent-kills (stop 56).
//
// Read continuously, a compaction can still purge events before a read
// sees them, and the hole it leaves would measure as a stall. A snapshot
// says which events it covers (stalls.Stamp.Covers): where those go past
// the last event read of the agent, the time between that event and the
// snapshot is unread, and a kill whose measure it overlaps does not
// measure the agent.
const (
	// stallReadEvery is the pause between two reads of a stream's stall
	// agents' events, far shorter than the time between two compactions.
	// Each stream's reads share one consumer (stalls.Tail): a consumer a
	// read, created and deleted through the JetStream meta layer, which
	// every server applies, put it behind in a 6-node run.
	stallReadEvery = 3 * time.Second
	// stallReadWait bounds a measure's wait for the reads to pass its
	// end: a stream's read fails while it elects a leader (up to 9 s),
	// and the next one tries again.
	stallReadWait = 45 * time.Second
)

// stampLog holds the stall agents' events read so far, each once, what
// compactions purged unread, and, for each stream, when its last read
// began: every event the stream stored before then was read.
type stampLog struct {
	mu     sync.Mutex
	stamps map[string][]stalls.Stamp
	last   map[string]stalls.Stamp // each agent's event of the highest sequence read
	unread map[string][]span       // each agent's times whose events were purged unread
	readTo map[string]time.Time    // each stream's last read's start
	moved  chan struct{}           // closed when a readTo advances

	reads, failed int           // reads made, and those that failed
	slowest       time.Duration // the longest read
}

// span is a time between two events.
type span struct{ from, to time.Time }

// newStampLog returns the log of the streams named.
func newStampLog(streams []string) *stampLog {
	s := &stampLog{stamps: map[string][]stalls.Stamp{}, last: map[string]stalls.Stamp{},
		unread: map[string][]span{}, readTo: map[string]time.Time{}, moved: make(chan struct{})}
	for _, st := range streams {
		s.readTo[st] = time.Time{}
	}
	return s
}

// add records read, a read of stream that began at began, keeping each
// event once: an agent's events come in the order of their sequences, as
// a read delivers them, so one at or below the last recorded was read
// before. A snapshot covering events past the agent's last one
// read marks the time between them unread.
func (s *stampLog) add(stream string, read map[string][]stalls.Stamp, began time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for agent, ss := range read {
		for _, st := range ss {
			last := s.last[agent]
			if st.Seq <= last.Seq {
				continue
			}
			s.stamps[agent] = append(s.stamps[agent], st)
			if st.Covers > 0 && last.Seq < st.Covers {
				s.unread[agent] = append(s.unread[agent], span{from: last.At, to: st.At})
			}
			s.last[agent] = st
		}
	}
	if began.After(s.readTo[stream]) {
		s.readTo[stream] = began
		close(s.moved)
		s.moved = make(chan struct{})
	}
}

// since returns a copy of the events stored from from on, by agent.
func (s *stampLog) since(from time.Time) map[string][]stalls.Stamp {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string][]stalls.Stamp{}
	for agent, ss := range s.stamps {
		for _, st := range ss {
			if !st.At.Before(from) {
				out[agent] = append(out[agent], st)
			}
		}
	}
	return out
}

// unreadIn reports whether a compaction purged events of agent stored
// between from and to before they were read.
func (s *stampLog) unreadIn(agent string, from, to time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.ContainsFunc(s.unread[agent], func(u span) bool { return u.from.Before(to) && u.to.After(from) })
}

// waitPast waits until every stream's reads began after at, for up to
// limit.
func (s *stampLog) waitPast(ctx context.Context, at time.Time, limit time.Duration) error {
	timeout := time.After(limit)
	for {
		s.mu.Lock()
		behind, moved := "", s.moved
		for st, t := range s.readTo {
			if !t.After(at) {
				behind = st
				break
			}
		}
		s.mu.Unlock()
		if behind == "" {
			return nil
		}
		select {
		case <-moved:
		case <-ctx.Done():
			return ctx.Err()
		case <-timeout:
			return fmt.Errorf("the stall agents' events on %s were not read past %s within %s", behind, at.Format(clock), limit)
		}
	}
}

// count counts one read that took took and failed with err.
func (s *stampLog) count(took time.Duration, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reads++
	if err != nil {
		s.failed++
	}
	s.slowest = max(s.slowest, took)
}

// String says how the reads went.
func (s *stampLog) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return fmt.Sprintf("%d reads of the stall agents' events on %d streams, one a stream every %s, %d failed (a stream electing a leader), the slowest %s",
		s.reads, len(s.readTo), stallReadEvery, s.failed, s.slowest.Round(time.Millisecond))
}

// record reads each stream's stall agents' events every stallReadEvery
// into the watch's stamp log until ctx ends, each stream on its own so
// that one electing a leader holds up no other. A read that fails is
// made again from the same point at the next.
func (w *stallWatch) record(ctx context.Context) {
	var wg sync.WaitGroup
	for stream, subjects := range w.byStream {
		wg.Go(func() {
			tail := stalls.NewTail(w.js, stream, subjects, time.Now().Add(-stallActive))
			for ctx.Err() == nil {
				began := time.Now()
				read, err := tail.Read(ctx)
				w.rec.count(time.Since(began), err)
				w.traceRead(stream, began, read, err)
				if err == nil {
					w.rec.add(stream, read, began)
				}
				sleep(ctx, stallReadEvery)
			}
		})
	}
	wg.Wait()
}

// traceRead writes one read to the watch's trace, if it has one: the
// stream, when the read began, how long it took, and each agent's events
// read with the last one's time, or its error.
func (w *stallWatch) traceRead(stream string, began time.Time, read map[string][]stalls.Stamp, err error) {
	if w.trace == nil {
		return
	}
	line := fmt.Sprintf("%s %s took %s", began.Format(clock), stream, time.Since(began).Round(time.Millisecond))
	if err != nil {
		line += " error: " + err.Error()
	}
	for agent, ss := range read {
		last := ""
		for _, st := range ss {
			if t := st.At.Format(clock); t > last {
				last = t
			}
		}
		line += fmt.Sprintf(" %s:%d@%s", agent, len(ss), last)
	}
	w.traceMu.Lock()
	fmt.Fprintln(w.trace, line)
	w.traceMu.Unlock()
}
