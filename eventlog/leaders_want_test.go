package eventlog

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// wantLeaders spreads the default 8 shards' 16 streams 6/5/5 over 3
// servers and 3/3/3/3/2/2 over 6 from any start, gives a returned server
// its share back moving only that share, moves nothing once spread,
// never wants a server that is not a current replica, and on 6 servers
// with R3 placement leaves no stream it could move to a replica leading
// 2 fewer.
func TestWantLeaders(t *testing.T) {
	servers := func(n int) []string {
		var out []string
		for i := range n {
			out = append(out, fmt.Sprintf("s%d", i))
		}
		return out
	}
	check := func(t *testing.T, leaders []string, current [][]string, all []string) (map[string]int, []string) {
		t.Helper()
		got := wantLeaders(leaders, current, all)
		counts := map[string]int{}
		for i, w := range got {
			if leaders[i] != "" && !slices.Contains(current[i], w) {
				t.Fatalf("stream %d wants %s, not a current replica of %v", i, w, current[i])
			}
			counts[w]++
		}
		if again := wantLeaders(got, current, all); !slices.Equal(again, got) {
			t.Fatalf("a spread log moves again: %v -> %v", got, again)
		}
		return counts, got
	}
	sorted := func(counts map[string]int) []int {
		var c []int
		for _, n := range counts {
			c = append(c, n)
		}
		slices.Sort(c)
		slices.Reverse(c)
		return c
	}
	rnd := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{3, 6} {
		all := servers(n)
		want := map[int][]int{3: {6, 5, 5}, 6: {3, 3, 3, 3, 2, 2}}[n]
		t.Run(fmt.Sprintf("%d servers, every one a replica", n), func(t *testing.T) {
			current := make([][]string, 16)
			leaders := make([]string, 16)
			for i := range current {
				current[i] = all
				leaders[i] = all[0] // every stream created through one server
			}
			counts, got := check(t, leaders, current, all)
			if c := sorted(counts); !slices.Equal(c, want) {
				t.Fatalf("leaders per server %v (%v), want %v", c, counts, want)
			}
			// The last server is lost: its streams are elected on the
			// others, and it is wanted by none; once it returns it gets
			// its share back, and only that share moves.
			lost, share := all[n-1], counts[all[n-1]]
			down := make([][]string, 16)
			for i := range got {
				down[i] = all[:n-1]
				if got[i] == lost {
					got[i] = all[rnd.IntN(n-1)]
				}
			}
			if c, _ := check(t, got, down, all); c[lost] != 0 {
				t.Fatalf("the lost server is wanted by %d streams", c[lost])
			}
			counts, back := check(t, got, current, all)
			if c := sorted(counts); !slices.Equal(c, want) {
				t.Fatalf("after the return: leaders per server %v (%v), want %v", c, counts, want)
			}
			moved := 0
			for i := range back {
				if back[i] != got[i] {
					moved++
				}
			}
			if moved != share {
				t.Errorf("%d streams moved for the returned server's share of %d", moved, share)
			}
		})
	}
	t.Run("6 servers, R3 placement", func(t *testing.T) {
		all := servers(6)
		worst := 0
		for range 500 {
			current := make([][]string, 16)
			leaders := make([]string, 16)
			for i := range current {
				// Placement spreads replicas: 3 servers from a random one.
				first := rnd.IntN(6)
				current[i] = []string{all[first], all[(first+1)%6], all[(first+2)%6]}
				leaders[i] = current[i][rnd.IntN(3)]
			}
			counts, got := check(t, leaders, current, all)
			for i, w := range got {
				if w != all[i%6] {
					for _, c := range current[i] {
						if counts[c]+1 < counts[w] {
							t.Fatalf("stream %d stays on %s (%d leaders) while its replica %s leads %d", i, w, counts[w], c, counts[c])
						}
					}
				}
			}
			worst = max(worst, sorted(counts)[0])
		}
		t.Logf("the busiest server of 6 led at most %d of 16 streams over 500 random R3 placements", worst)
	})
}

// TestLiveReplicas: a server that crashed is still "current" and not
// "offline" in its streams' answers for seconds; one stream's leader that
// has not heard from it within liveWithin makes it wanted by no stream,
// though other streams' leaders (that heard from it just before it
// died) still see it current; a replica behind in one stream (not
// current) may still be wanted for another; and a replica the server
// cannot name is no server.
func TestLiveReplicas(t *testing.T) {
	peer := func(name string, current bool, active time.Duration) *jetstream.PeerInfo {
		return &jetstream.PeerInfo{Name: name, Current: current, Active: active}
	}
	infos := []*jetstream.ClusterInfo{
		// s2 crashed 8 s ago: this leader has not heard from it since.
		{Leader: "s0", Replicas: []*jetstream.PeerInfo{peer("s1", true, 200*time.Millisecond), peer("s2", true, 8*time.Second)}},
		// This leader heard from s2 just before it died.
		{Leader: "s1", Replicas: []*jetstream.PeerInfo{peer("s0", true, 100*time.Millisecond), peer("s2", true, 900*time.Millisecond)}},
		// s0 is behind here, under load.
		{Leader: "s1", Replicas: []*jetstream.PeerInfo{peer("s0", false, 100*time.Millisecond), peer("s2", true, 500*time.Millisecond)}},
		nil, // no info
		{Leader: "s0", Replicas: []*jetstream.PeerInfo{peer("s1", true, 0), peer("Server name unknown at this time (peerID: abc)", true, 0)}},
	}
	leaders, current, servers := liveReplicas(infos, nil)
	if want := []string{"s0", "s1", "s1", "", "s0"}; !slices.Equal(leaders, want) {
		t.Fatalf("leaders %v, want %v", leaders, want)
	}
	if want := []string{"s0", "s1", "s2"}; !slices.Equal(servers, want) {
		t.Fatalf("servers %v, want %v", servers, want)
	}
	want := [][]string{{"s0", "s1"}, {"s1", "s0"}, {"s1"}, nil, {"s0", "s1"}}
	for i := range want {
		if !slices.Equal(current[i], want[i]) {
			t.Errorf("stream %d may be led by %v, want %v", i, current[i], want[i])
		}
	}
	// The third stream's turn in the order is s2's (2 mod 3): it is not
	// wanted, though that stream's leader heard from s2 half a second ago.
	for i, w := range wantLeaders(leaders, current, servers) {
		if w == "s2" {
			t.Errorf("stream %d wants the crashed s2 to lead it", i)
		}
	}
}

// A server the caller's embedded server does not route to (SIGKILLed a
// moment ago, still heard from within liveWithin) is wanted by no stream,
// and keeps its place in the servers' order.
func TestLiveReplicasUnreachable(t *testing.T) {
	peer := func(name string) *jetstream.PeerInfo {
		return &jetstream.PeerInfo{Name: name, Current: true, Active: 300 * time.Millisecond}
	}
	infos := []*jetstream.ClusterInfo{
		{Leader: "s0", Replicas: []*jetstream.PeerInfo{peer("s1"), peer("s2")}},
		{Leader: "s0", Replicas: []*jetstream.PeerInfo{peer("s1"), peer("s2")}},
		{Leader: "s0", Replicas: []*jetstream.PeerInfo{peer("s1"), peer("s2")}},
	}
	routed := func(s string) bool { return s != "s1" }
	leaders, current, servers := liveReplicas(infos, routed)
	if want := []string{"s0", "s1", "s2"}; !slices.Equal(servers, want) {
		t.Fatalf("servers %v, want %v", servers, want)
	}
	for i, c := range current {
		if slices.Contains(c, "s1") {
			t.Errorf("stream %d may be led by the unreachable s1: %v", i, c)
		}
	}
	if want, got := []string{"s0", "s0", "s2"}, wantLeaders(leaders, current, servers); !slices.Equal(got, want) {
		t.Errorf("wanted leaders %v, want %v", got, want)
	}
	// Reached, s1 gets its share.
	leaders, current, servers = liveReplicas(infos, nil)
	if want, got := []string{"s0", "s1", "s2"}, wantLeaders(leaders, current, servers); !slices.Equal(got, want) {
		t.Errorf("wanted leaders %v with s1 reached, want %v", got, want)
	}
}
