package eventlog

import (
	"context"
	"encoding/json"
	"fmt"
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
// streams evenly over the servers that hold them: the log's streams in
// order (each shard's events stream, then each one's chunks stream), the
// i-th wants the i-th of the servers in name order (modulo their count),
// so K shards of each kind on n servers give each server 2K/n leaders, and
// a server that returned gets its share back. A stream whose wanted
// server is not a current replica keeps its leader. For each stream led
// elsewhere it asks its leader to step down for the wanted server
// (JetStream's leader stepdown with a preferred server); the election
// that follows moves it within about a second, and the stream's writes
// wait for it as for any election. Call it again to check.
//
// An unsharded or unreplicated log has nothing to spread: nil. Errors: a
// stream's info or a stepdown JetStream refused, after trying every
// stream.
func (l *Log) SpreadLeaders(ctx context.Context) ([]Leader, error) {
	if !l.sharded() || l.cfg.Replicas < 2 || l.cfg.Bind {
		return nil, nil
	}
	names := append(l.streamNames(false), l.streamNames(true)...)
	type peers struct {
		leader  string
		current []string
	}
	found := make([]peers, len(names))
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
		found[i].leader = ci.Leader
		if ci.Leader != "" {
			found[i].current = append(found[i].current, ci.Leader)
			servers[ci.Leader] = true
		}
		for _, r := range ci.Replicas {
			servers[r.Name] = true
			if r.Current && !r.Offline {
				found[i].current = append(found[i].current, r.Name)
			}
		}
	}
	order := make([]string, 0, len(servers))
	for s := range servers {
		order = append(order, s)
	}
	slices.Sort(order)
	var out []Leader
	for i, name := range names {
		if len(order) == 0 || found[i].leader == "" {
			out = append(out, Leader{Stream: name, Leader: found[i].leader})
			continue
		}
		want := order[i%len(order)]
		ld := Leader{Stream: name, Leader: found[i].leader, Want: want}
		if want != ld.Leader && slices.Contains(found[i].current, want) {
			if err := l.stepDown(ctx, name, want); err != nil {
				errs = append(errs, err)
			} else {
				ld.Moved = true
				l.logger.Info("stream leader asked to step down for its share of the servers", "stream", name, "from", ld.Leader, "to", want)
			}
		}
		out = append(out, ld)
	}
	if len(errs) > 0 {
		return out, fmt.Errorf("eventlog: spread leaders: %v", errs)
	}
	return out, nil
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
