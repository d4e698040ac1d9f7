package eventlog

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
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
// share back. A server is wanted only while live (liveReplicas: no
// stream's leader sees it offline or has not heard from it lately), so no
// leader steps down for a server that crashed. A stream whose wanted
// server is not a current replica on a live server (R3 placed on 3 of 6
// servers, a server still catching up, one gone) is given to the
// current replica that leads fewest, when it leads at least 2 fewer than
// the stream's leader. For each stream led elsewhere it asks its leader
// to step down for the wanted server (JetStream's leader stepdown with a
// preferred server); the election that follows moves it within about a
// second, and the stream's writes wait for it as for any election. Call
// it again to check: a spread log moves nothing.
//
// reachable, when not nil, says whether a server can be reached now (the
// caller's embedded server routes to it, agentd's by a route up for 10 s
// at least, so a server restarted a moment ago is given nothing yet); a
// server it does not reach is not live either. A leader hears from a replica every second, so a
// server SIGKILLed a moment ago still looks live to it, and a stream
// handed to it would have no leader until the others' election timeout;
// the dead server's routes closed with it. It is asked once for each
// server the streams name, after their infos are read, and again for the
// wanted server just before each stepdown: a server killed while the
// infos were read (in a 6-node chaos run, 0.25 s before the stepdowns)
// is given nothing.
//
// An unsharded or unreplicated log has nothing to spread: nil. Errors: a
// stream's info or a stepdown JetStream refused, after trying every
// stream.
func (l *Log) SpreadLeaders(ctx context.Context, reachable func(server string) bool) ([]Leader, error) {
	if !l.sharded() || l.cfg.Replicas < 2 || l.cfg.Bind {
		return nil, nil
	}
	names := append(l.streamNames(false), l.streamNames(true)...)
	infos, errs := l.clusterInfos(ctx, names)
	leaders, current, order := liveReplicas(infos, reachedOnce(infos, reachable))
	wants := wantLeaders(leaders, current, order)
	var out []Leader
	for i, name := range names {
		ld := Leader{Stream: name, Leader: leaders[i], Want: wants[i]}
		if ld.Want != ld.Leader && reachable != nil && !reachable(ld.Want) {
			l.logger.Info("stream leader not asked to step down: the server it would go to is no longer reachable", "stream", name, "from", ld.Leader, "to", ld.Want)
		} else if ld.Want != ld.Leader {
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

// clusterInfos reads each stream's cluster info (nil for one whose info
// could not be read, with its error).
func (l *Log) clusterInfos(ctx context.Context, names []string) ([]*jetstream.ClusterInfo, []error) {
	infos := make([]*jetstream.ClusterInfo, len(names))
	var errs []error
	for i, name := range names {
		info, err := l.js.Stream(ctx, name)
		if err != nil {
			errs = append(errs, fmt.Errorf("stream %s: %w", name, err))
			continue
		}
		infos[i] = info.CachedInfo().Cluster
	}
	return infos, errs
}

// reachedOnce asks reachable (when not nil) once about each server infos
// name, and answers from that.
func reachedOnce(infos []*jetstream.ClusterInfo, reachable func(string) bool) func(string) bool {
	if reachable == nil {
		return nil
	}
	reached := map[string]bool{}
	ask := func(name string) {
		if _, ok := reached[name]; !ok && name != "" {
			reached[name] = reachable(name)
		}
	}
	for _, ci := range infos {
		if ci == nil {
			continue
		}
		ask(ci.Leader)
		for _, r := range ci.Replicas {
			ask(r.Name)
		}
	}
	return func(name string) bool { return reached[name] }
}

// liveWithin is how recently a stream's leader must have heard from a
// replica for it to be live: its Raft heartbeats come every second, so a
// live replica was heard within about one (TestLiveReplicas). A server
// that crashed stays "current" and not "offline" in the leaders' answers
// for up to 10 s (the server's lost-quorum interval), and "offline" only
// once its peers find it orphaned, so those two flags alone would let a
// stream's leader step down for a dead server, leaving the stream without
// a leader until an election, its writes waiting meanwhile. A live
// replica heard late (a loaded server) is only skipped for this spread.
const liveWithin = 3 * time.Second

// liveReplicas returns, of each stream's cluster info (nil for a stream
// whose info could not be read), its leader ("" for none), the servers
// that may lead it (its leader and its current replicas on live servers),
// and every server named, in name order. A server is live when no
// stream's leader sees it offline or has not heard from it within
// liveWithin: that is a fact about the server, not one stream, so the
// streams agree on one set of live servers, as the meta group would,
// rather than each trusting its own leader's view (a crashed server's
// streams elect new leaders, which soon see it gone). Being current
// (caught up) stays a fact of each stream: a replica behind in one stream
// under load may still lead another. Replicas the server cannot name (a
// peer not heard from since a restart of the cluster) are left out, and
// so are servers reachable (when not nil) does not reach.
func liveReplicas(infos []*jetstream.ClusterInfo, reachable func(string) bool) (leaders []string, current [][]string, servers []string) {
	leaders = make([]string, len(infos))
	current = make([][]string, len(infos))
	named, dead := map[string]bool{}, map[string]bool{}
	for i, ci := range infos {
		if ci == nil {
			continue
		}
		leaders[i] = ci.Leader
		if ci.Leader != "" {
			named[ci.Leader] = true
		}
		for _, r := range ci.Replicas {
			if r.Name == "" || strings.Contains(r.Name, " ") {
				continue // "Server name unknown at this time (peerID: ...)"
			}
			named[r.Name] = true
			if r.Offline || r.Active > liveWithin || (reachable != nil && !reachable(r.Name)) {
				dead[r.Name] = true
			}
		}
	}
	for i, ci := range infos {
		if ci == nil {
			continue
		}
		if ci.Leader != "" {
			current[i] = append(current[i], ci.Leader)
		}
		for _, r := range ci.Replicas {
			if r.Current && named[r.Name] && !dead[r.Name] {
				current[i] = append(current[i], r.Name)
			}
		}
	}
	return leaders, current, slices.Sorted(maps.Keys(named))
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
