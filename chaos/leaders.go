package main

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// The stall watch asks each events stream's leader just before a kill,
// but a leader can move in the instant between (the leader spread hands
// shards to a node that came back, and chaos may kill it at once). So the
// watch also follows JetStream's leader-elected advisories, and a kill's
// measure counts as the victim's every shard whose last election before
// the kill named the victim.

// leaderAdvisories is where JetStream announces each stream's new leader.
const leaderAdvisories = "$JS.EVENT.ADVISORY.STREAM.LEADER_ELECTED.>"

// election is one leader-elected advisory: when, and who.
type election struct {
	at     time.Time
	leader string
}

// leaderLog holds each stream's elections, in the order they came.
type leaderLog struct {
	mu    sync.Mutex
	elect map[string][]election
}

// followLeaders subscribes on nc to the leader-elected advisories. A
// connection not allowed to see them (its permissions) only loses this
// second source: the leaders asked before each kill still count.
func followLeaders(nc *nats.Conn) (*leaderLog, *nats.Subscription, error) {
	l := &leaderLog{elect: map[string][]election{}}
	sub, err := nc.Subscribe(leaderAdvisories, func(m *nats.Msg) {
		var adv struct {
			Time   time.Time `json:"timestamp"`
			Stream string    `json:"stream"`
			Leader string    `json:"leader"`
		}
		if json.Unmarshal(m.Data, &adv) == nil && adv.Stream != "" {
			l.elected(adv.Stream, adv.Leader, adv.Time)
		}
	})
	return l, sub, err
}

// elected records stream's election of leader at at.
func (l *leaderLog) elected(stream, leader string, at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.elect[stream] = append(l.elect[stream], election{at: at, leader: leader})
}

// ledBy returns the streams whose last election before t named node.
func (l *leaderLog) ledBy(node string, t time.Time) map[string]bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	led := map[string]bool{}
	for stream, es := range l.elect {
		var last election
		for _, e := range es {
			if e.at.Before(t) && !e.at.Before(last.at) {
				last = e
			}
		}
		if last.leader == node {
			led[stream] = true
		}
	}
	return led
}

// around says who led stream at killed (by the advisories) and each of
// its elections from a second before from until to (to zero: 10 s after
// from): whether the stream of a stalled agent changed leaders then.
func (l *leaderLog) around(stream string, killed, from, to time.Time) string {
	if to.IsZero() {
		to = from.Add(10 * time.Second)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	at := "unknown"
	var during []string
	var last time.Time
	for _, e := range l.elect[stream] {
		if e.at.Before(killed) && !e.at.Before(last) {
			at, last = e.leader, e.at
		}
		if !e.at.Before(from.Add(-time.Second)) && !e.at.After(to) {
			during = append(during, e.leader+" at "+e.at.Format(clock))
		}
	}
	el := "no election"
	if len(during) > 0 {
		el = "elected " + strings.Join(during, ", ")
	}
	return fmt.Sprintf("%s led by %s at the kill, %s around the stall", stream, at, el)
}

// withLeadersAt returns k with the agents of every shard the advisories
// say its victim led when it was killed added to its share (held and
// ledShards), beside those asked before the kill.
func (w *stallWatch) withLeadersAt(k stallKill) stallKill {
	if w.leaders == nil {
		return k
	}
	led := w.leaders.ledBy(k.victim, k.killed)
	if led[leasesStream] {
		k.ledLeases = true
	}
	var moved []string
	for stream := range led {
		if !k.led[stream] && slices.Contains(w.ls.Events, stream) {
			moved = append(moved, stream)
		}
	}
	if len(moved) == 0 {
		return k
	}
	k.held, k.led = maps.Clone(k.held), maps.Clone(k.led)
	for _, stream := range moved {
		k.led[stream] = true
		k.ledShards++
		k.movedShards++
	}
	for _, a := range w.agents {
		if k.led[w.ls.EventsOf(a)] {
			k.held[a] = true
		}
	}
	return k
}
