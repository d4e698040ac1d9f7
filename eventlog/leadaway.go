package eventlog

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
)

// LeadAway asks every stream of the log, and each of extra (the lease
// bucket's, say), that server leads to step down for another server: the
// live current replica (liveReplicas) that leads fewest of them, in name
// order on a tie. A node that stops calls it before it hands its
// partitions off, so the elections its server's lame duck mode would
// start after the handoff (nats-server moves a stopping server's Raft
// leaders then, and waits a second) happen while the node still serves
// its agents, not while their new owners recover them: stop 65's handoff
// bench saw a new owner's first read wait that second. A stream with no
// other live current replica keeps its leader, for the lame duck mode.
// Then it waits, until ctx ends, for every stream asked to be led by
// another server: a consumer made on a stream while it elects may deliver
// nothing until it is made again (2 s later: the same bench saw a drain
// wait for two such), and the new owners' catch-up makes consumers. It
// returns the streams asked, each with the server asked for.
func (l *Log) LeadAway(ctx context.Context, server string, extra []string, reachable func(string) bool) ([]Leader, error) {
	if l.cfg.Replicas < 2 || l.cfg.Bind {
		return nil, nil
	}
	names := append(append(l.streamNames(false), l.streamNames(true)...), extra...)
	infos, errs := l.clusterInfos(ctx, names)
	leaders, current, _ := liveReplicas(infos, reachedOnce(infos, reachable))
	wants := awayFrom(server, leaders, current)
	var out []Leader
	for i, name := range names {
		if wants[i] == "" {
			continue
		}
		if err := l.stepDown(ctx, name, wants[i]); err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, Leader{Stream: name, Leader: server, Want: wants[i], Moved: true})
	}
	if err := l.ledElsewhere(ctx, server, out); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return out, fmt.Errorf("eventlog: lead away from %s: %w", server, err)
	}
	return out, nil
}

// awayFrom returns, for each stream server leads (leaders[i]), the other
// current replica (current[i]) that leads fewest, counting those it is
// given, in name order on a tie; "" for a stream server does not lead or
// that has no other current replica.
func awayFrom(server string, leaders []string, current [][]string) []string {
	count := map[string]int{}
	for _, l := range leaders {
		count[l]++
	}
	out := make([]string, len(leaders))
	for i, l := range leaders {
		if l != server {
			continue
		}
		for _, c := range slices.Sorted(slices.Values(current[i])) {
			if c != server && (out[i] == "" || count[c] < count[out[i]]) {
				out[i] = c
			}
		}
		if out[i] != "" {
			count[out[i]]++
		}
	}
	return out
}

// leadAwayPoll paces LeadAway's reads of the moved streams' leaders, and
// bounds each: a stream electing may not answer.
const leadAwayPoll = 50 * time.Millisecond

// ledElsewhere waits until every stream of moved has a leader other than
// server, asking each every leadAwayPoll, until ctx ends.
func (l *Log) ledElsewhere(ctx context.Context, server string, moved []Leader) error {
	for _, ld := range moved {
		for {
			actx, cancel := context.WithTimeout(ctx, 5*leadAwayPoll)
			info, err := l.js.Stream(actx, ld.Stream)
			cancel()
			if err == nil {
				if c := info.CachedInfo().Cluster; c != nil && c.Leader != "" && c.Leader != server {
					break
				}
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("stream %s: no leader but %s yet: %w", ld.Stream, server, ctx.Err())
			case <-time.After(leadAwayPoll):
			}
		}
	}
	return nil
}
