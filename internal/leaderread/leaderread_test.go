package leaderread_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/forever-agents/forever/eventlog/eventlogtest"
	"github.com/forever-agents/forever/internal/leaderread"
)

// TestLastAndNext: Last is a subject's last sequence, wildcards allowed,
// 0 for none; Next the first at or after a sequence, NextSince the first
// stored at or after a time, 0 for none; on a
// stream that allows direct gets; a missing stream is an APIError.
func TestLastAndNext(t *testing.T) {
	ctx := t.Context()
	s := eventlogtest.RunServer(t, eventlogtest.ServerOptions{})
	js, err := jetstream.New(eventlogtest.Connect(t, s))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}, AllowDirect: true}); err != nil {
		t.Fatal(err)
	}
	var times []time.Time
	for _, subj := range []string{"s.x", "s.y", "s.x"} { // 1, 2, 3
		if _, err := js.Publish(ctx, subj, nil); err != nil {
			t.Fatal(err)
		}
		m, err := js.Conn().Request("$JS.API.STREAM.MSG.GET.S", []byte(fmt.Sprintf(`{"seq":%d}`, len(times)+1)), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var r struct {
			Message struct{ Time time.Time } `json:"message"`
		}
		if err := json.Unmarshal(m.Data, &r); err != nil {
			t.Fatal(err)
		}
		times = append(times, r.Message.Time)
	}
	for _, c := range []struct {
		name string
		got  func() (uint64, error)
		want uint64
	}{
		{"last of all", func() (uint64, error) { return leaderread.Last(ctx, js, "S", "s.>") }, 3},
		{"last of y", func() (uint64, error) { return leaderread.Last(ctx, js, "S", "s.y") }, 2},
		{"last of none", func() (uint64, error) { return leaderread.Last(ctx, js, "S", "s.z") }, 0},
		{"next of all from 0", func() (uint64, error) { return leaderread.Next(ctx, js, "S", "s.>", 0) }, 1},
		{"next of x from 2", func() (uint64, error) { return leaderread.Next(ctx, js, "S", "s.x", 2) }, 3},
		{"next of y from 3", func() (uint64, error) { return leaderread.Next(ctx, js, "S", "s.y", 3) }, 0},
		{"next past the end", func() (uint64, error) { return leaderread.Next(ctx, js, "S", "s.>", 4) }, 0},
		{"next of x since the 2nd", func() (uint64, error) { return leaderread.NextSince(ctx, js, "S", "s.x", times[1]) }, 3},
		{"next of all since the 3rd", func() (uint64, error) { return leaderread.NextSince(ctx, js, "S", "s.>", times[2]) }, 3},
		{"next of y since the 3rd", func() (uint64, error) { return leaderread.NextSince(ctx, js, "S", "s.y", times[2]) }, 0},
		{"next since after the end", func() (uint64, error) { return leaderread.NextSince(ctx, js, "S", "s.>", times[2].Add(time.Second)) }, 0},
	} {
		got, err := c.got()
		if err != nil || got != c.want {
			t.Errorf("%s: %d, %v; want %d", c.name, got, err, c.want)
		}
	}
	_, err = leaderread.Last(ctx, js, "NONE", "s.>")
	if api := (*jetstream.APIError)(nil); !errors.As(err, &api) || api.Code != 404 {
		t.Errorf("last on a missing stream: %v, want a 404 APIError", err)
	}
}

// TestAPIPrefix: requests go where js sends its own: a domain's prefix, a
// given prefix (with or without its dot), else the default.
func TestAPIPrefix(t *testing.T) {
	for _, c := range []struct {
		o    jetstream.JetStreamOptions
		want string
	}{
		{jetstream.JetStreamOptions{}, "$JS.API."},
		{jetstream.JetStreamOptions{Domain: "hub"}, "$JS.hub.API."},
		{jetstream.JetStreamOptions{APIPrefix: "$JS.acc.API"}, "$JS.acc.API."},
		{jetstream.JetStreamOptions{APIPrefix: "x."}, "x."},
	} {
		if got := leaderread.APIPrefix(c.o); got != c.want {
			t.Errorf("APIPrefix(%+v) = %q, want %q", c.o, got, c.want)
		}
	}
}

// TestOnCluster: on a 3-node cluster, through a connection to a server
// that is not the stream's leader, Last and Next answer what the leader
// holds, also after writes made while a replica was down.
func TestOnCluster(t *testing.T) {
	ctx := t.Context()
	srvs := eventlogtest.RunCluster(t, 3)
	js, err := jetstream.New(eventlogtest.Connect(t, srvs[0]))
	if err != nil {
		t.Fatal(err)
	}
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}, Replicas: 3, AllowDirect: true})
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil || info.Cluster == nil {
		t.Fatalf("stream info: %+v, %v", info, err)
	}
	var followers []int
	leader := -1
	for i, s := range srvs {
		if s.Name() != info.Cluster.Leader {
			followers = append(followers, i)
		} else {
			leader = i
		}
	}
	// The writes go through the leader's server: the first connection's
	// may be the follower stopped.
	if js, err = jetstream.New(eventlogtest.Connect(t, srvs[leader])); err != nil {
		t.Fatal(err)
	}
	restart := eventlogtest.StopServer(t, srvs, followers[0])
	via, err := jetstream.New(eventlogtest.Connect(t, srvs[followers[1]]))
	if err != nil {
		t.Fatal(err)
	}
	for _, subj := range []string{"s.x", "s.y", "s.x"} { // 1, 2, 3, with a replica down
		if _, err := js.Publish(ctx, subj, nil); err != nil {
			t.Fatal(err)
		}
	}
	restart()
	if got, err := leaderread.Last(ctx, via, "S", "s.x"); err != nil || got != 3 {
		t.Errorf("last of x through a follower: %d, %v; want 3", got, err)
	}
	if got, err := leaderread.Next(ctx, via, "S", "s.y", 1); err != nil || got != 2 {
		t.Errorf("next of y from 1 through a follower: %d, %v; want 2", got, err)
	}
	if got, err := leaderread.Next(ctx, via, "S", "s.y", 3); err != nil || got != 0 {
		t.Errorf("next of y from 3 through a follower: %d, %v; want none", got, err)
	}
}
