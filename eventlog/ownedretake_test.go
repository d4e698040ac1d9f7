package eventlog_test

import (
	"cmp"
	"context"
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/eventlog/eventlogtest"
)

// TestOwnedViewsRetakeAsksNoStreamInfo: a running Follower that takes a
// new partition, or one it followed before, opens it without asking the
// stream's info. Asked, the info timed out after 5 s while the stream
// elected a leader just after a node died, and held every recovery of the
// partitions the node took (chaos, stop 58). The views stay right: the
// partition followed again resumes from the cursor it committed after the
// info was last read, rather than being judged past the stream's end.
func TestOwnedViewsRetakeAsksNoStreamInfo(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	s := eventlogtest.RunServer(t, eventlogtest.ServerOptions{})
	lg := eventlogtest.OpenOn(t, s, eventlog.Config{Shards: 2, Partitions: 4, OwnedViews: true})
	var p0, p2 string // both in shard 0
	for i := 0; p0 == "" || p2 == ""; i++ {
		id := "agent" + strconv.Itoa(i)
		switch eventlog.PartitionOf(id, 4) {
		case 0:
			p0 = cmp.Or(p0, id)
		case 2:
			p2 = cmp.Or(p2, id)
		}
	}
	tick := func(agent string, n int) {
		t.Helper()
		for range n {
			if _, err := lg.Append(ctx, eventlog.Event{Agent: agent, Type: "tick", Data: json.RawMessage(`1`)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := lg.FollowPartition(0); err != nil {
		t.Fatal(err)
	}
	f := newFollower(t, lg, counter(1))
	eventlogtest.RunFollower(t, f)
	tick(p0, 2)
	if err := f.WaitPartition(ctx, 0); err != nil {
		t.Fatal(err)
	}

	nc := eventlogtest.Connect(t, s)
	infos, err := nc.SubscribeSync("$JS.API.STREAM.INFO.>")
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	step := func(what string, do func()) {
		t.Helper()
		do()
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
		if n, _, _ := infos.Pending(); n != 0 {
			var subjects []string
			for range n {
				m, _ := infos.NextMsg(0)
				subjects = append(subjects, m.Subject)
			}
			t.Errorf("%s asked the stream's info %d times: %v", what, n, subjects)
		}
	}
	follow := func(p int) {
		if err := lg.FollowPartition(p); err != nil {
			t.Fatal(err)
		}
		if err := f.WaitPartition(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	tick(p2, 3)
	step("taking a new partition", func() { follow(2) })
	tick(p2, 2) // its cursor moves past the last sequence the info said
	if err := f.WaitPartition(ctx, 2); err != nil {
		t.Fatal(err)
	}
	step("releasing it", func() {
		if err := lg.UnfollowPartition(2); err != nil {
			t.Fatal(err)
		}
		tick(p0, 1)
		if err := f.WaitPartition(ctx, 0); err != nil {
			t.Fatal(err)
		}
	})
	tick(p2, 1)
	step("taking it again", func() { follow(2) })
	if got, want := dump(t, lg, "counter")["n/"+p2], "6"; got != want {
		t.Errorf("partition 2's count = %q, want %q", got, want)
	}
	if got, want := dump(t, lg, "counter")["n/"+p0], "3"; got != want {
		t.Errorf("partition 0's count = %q, want %q", got, want)
	}
}
