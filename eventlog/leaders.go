package eventlog

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
)

// Leader is one stream's Raft leader, as SpreadLeaders found it.
type Leader struct {
	// Stream is the stream's name; Leader the server leading it (empty
	// while it has none); Want the server SpreadLeaders wants to lead it.
	Stream, Leader, Want string
	// Moved is whether SpreadLeaders asked the leader to step down for
	// Want.
	Moved bool
}

// SpreadLeaders spreads the Raft leaders of a replicated sharded log's
// streams evenly over the servers that hold them (wantLeaders): the log's
// streams in order (each shard's events stream, then each one's chunks
// stream), the i-th wants the i-th of the servers in name order (modulo
// their count), so K shards of each kind on n servers that each
// replicate every stream give each server 2K/n leaders (8 shards: 6/5/5
// on 3 servers, 3/3/3/3/2/2 on 6), and a server that returned gets its
// share back. A stream whose wanted server is not a current replica (R3
// placed on 3 of 6 servers, a server still catching up) is given to the
// current replica that leads fewest, when it leads at least 2 fewer than
// the stream's leader. For each stream led elsewhere it asks its leader
// to step down for the wanted server (JetStream's leader stepdown with a
// preferred server); the election that follows moves it within about a
// second, and the stream's writes wait for it as for any election. Call
// it again to check: a spread log moves nothing.
//
// An unsharded or unreplicated log has nothing to spread: nil. Errors: a
// stream's info or a stepdown JetStream refused, after trying every
// stream.
func (l *Log) SpreadLeaders(ctx context.Context) ([]Leader, error) {
	if !l.sharded() || l.cfg.Replicas < 2 || l.cfg.Bind {
		return nil, nil
	}
	names := append(l.streamNames(false), l.streamNames(true)...)
	leaders := make([]string, len(names))
	current := make([][]string, len(names))
	servers := map[string]bool{}
	var errs []error
	for i, name := range names {
		info, err := l.js.Stream(ctx, name)
		if err != nil {
			errs = append(errs, fmt.Errorf("stream %s: %w", name, err))
			continue
		}
		ci := info.CachedInfo().Cluster
		if ci == nil {
			continue
		}
		leaders[i] = ci.Leader
		if ci.Leader != "" {
			current[i] = append(current[i], ci.Leader)
			servers[ci.Leader] = true
		}
		for _, r := range ci.Replicas {
			servers[r.Name] = true
			if r.Current && !r.Offline {
				current[i] = append(current[i], r.Name)
			}
		}
	}
	order := slices.Sorted(maps.Keys(servers))
	wants := wantLeaders(leaders, current, order)
	var out []Leader
	for i, name := range names {
		ld := Leader{Stream: name, Leader: leaders[i], Want: wants[i]}
		if ld.Want != ld.Leader {
			if err := l.stepDown(ctx, name, ld.Want); err != nil {
				errs = append(errs, err)
			} else {
				ld.Moved = true
				l.logger.Info("stream leader asked to step down for its share of the servers", "stream", name, "from", ld.Leader, "to", ld.Want)
			}
		}
		out = append(out, ld)
	}
	if len(errs) > 0 {
		return out, fmt.Errorf("eventlog: spread leaders: %v", errs)
	}
	return out, nil
}

// wantLeaders returns the server each stream should be led by, given its
// leader now (leaders[i], "" for none: it keeps none), its current
// replicas (current[i], the leader among them) and every server in name
// order: the i-th stream wants servers[i mod n] when that is a current
// replica. The others (free) start at their leader and move, one at a
// time, to the current replica that leads fewest when it leads at least 2
// fewer than the stream's server, until none can: every move lowers the
// sum of the squared counts, so it ends, and as the free streams and the
// others' servers depend only on the replicas, a spread log moves
// nothing.
func wantLeaders(leaders []string, current [][]string, servers []string) []string {
	want := slices.Clone(leaders)
	if len(servers) == 0 {
		return want
	}
	count := map[string]int{}
	var free []int
	for i, l := range leaders {
		if l == "" {
			continue
		}
		if w := servers[i%len(servers)]; slices.Contains(current[i], w) {
			want[i] = w
		} else {
			free = append(free, i)
		}
		count[want[i]]++
	}
	for moved := true; moved; {
		moved = false
		for _, i := range free {
			from, to := want[i], ""
			for _, c := range slices.Sorted(slices.Values(current[i])) {
				if count[c]+1 < count[from] && (to == "" || count[c] < count[to]) {
					to = c
				}
			}
			if to != "" {
				count[from]--
				count[to]++
				want[i] = to
				moved = true
			}
		}
	}
	return want
}

// stepDown asks stream's leader to step down for the server preferred.
func (l *Log) stepDown(ctx context.Context, stream, preferred string) error {
	body, _ := json.Marshal(map[string]any{"placement": map[string]string{"preferred": preferred}})
	ctx, cancel, _ := l.bound(ctx)
	defer cancel()
	resp, err := l.nc.RequestWithContext(ctx, "$JS.API.STREAM.LEADER.STEPDOWN."+stream, body)
	if err != nil {
		return fmt.Errorf("stepdown of %s: %w", stream, err)
	}
	var r struct {
		Error *struct {
			Description string `json:"description"`
		} `json:"error"`
	}
	if err := json.Unmarshal(resp.Data, &r); err != nil {
		return fmt.Errorf("stepdown of %s: bad response %q", stream, resp.Data)
	}
	if r.Error != nil {
		return fmt.Errorf("stepdown of %s for %s: %s", stream, preferred, r.Error.Description)
	}
	return nil
}
