package eventlog

import (
	"log/slog"
	"time"
)

// catchUpClock times the phases of one catch-up (a consume with upto set),
// so that one slower than renewAfter says where it waited: the leader reads
// of its target, the wait for the consumer's first event, or the commits.
// A restarted node's startup catch-up of 458 events once took 10.3 s with
// no consumer renewal logged, and held every partition handed to the node
// as long (a 3-node chaos run, stop 58). Methods are no-ops on nil (a
// follow, not a catch-up).
type catchUpClock struct {
	start      time.Time
	lastRead   time.Duration // leader reads of the last sequence, summed
	firstEvent time.Duration // from start to the first event delivered
	commits    time.Duration // commits of applied events, summed
	events     int
	renewals   int
}

func newCatchUpClock(upto Seq) *catchUpClock {
	if upto == 0 {
		return nil
	}
	return &catchUpClock{start: time.Now()}
}

// readSince adds the leader reads begun at t.
func (c *catchUpClock) readSince(t time.Time) {
	if c != nil {
		c.lastRead += time.Since(t)
	}
}

func (c *catchUpClock) delivered(n int) {
	if c == nil {
		return
	}
	if c.events == 0 && n > 0 {
		c.firstEvent = time.Since(c.start)
	}
	c.events += n
}

func (c *catchUpClock) renewed() {
	if c != nil {
		c.renewals++
	}
}

// report logs the catch-up's phases when it took longer than renewAfter.
func (c *catchUpClock) report(logger *slog.Logger, behind string, after, upto Seq) {
	if c == nil {
		return
	}
	took := time.Since(c.start)
	if took <= renewAfter {
		return
	}
	logger.Info("catch-up was slow", "behind", behind, "from", after, "to", upto, "took", took,
		"leader_reads", c.lastRead, "first_event", c.firstEvent, "commits", c.commits,
		"events", c.events, "consumer_renewals", c.renewals)
}

// commit is f.commit, timed on a catch-up's clock.
func (c *catchUpClock) commit(f *Follower, group []*member, items []followed, cursor Seq) error {
	if c == nil {
		return f.commit(group, items, cursor)
	}
	t := time.Now()
	err := f.commit(group, items, cursor)
	c.commits += time.Since(t)
	return err
}
