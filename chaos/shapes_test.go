package main

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/forever-agents/forever/agentd/chathost"
	"github.com/forever-agents/forever/chat/chunk"
	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/eventlog/eventlogtest"
	"github.com/forever-agents/forever/internal/waitfor"
)

func TestPlanShapes(t *testing.T) {
	tests := []struct {
		name                       string
		kills, stepdowns, handoffs int
	}{
		{name: "none", kills: 20},
		{name: "between kills", kills: 50, stepdowns: 20, handoffs: 5},
		{name: "no kills", kills: 0, stepdowns: 3, handoffs: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(7, 3))
			plan := planShapes(rng, tt.kills, tt.stepdowns, tt.handoffs)
			got := map[string]int{}
			for gap, shapes := range plan {
				if gap < 0 || gap > tt.kills {
					t.Errorf("gap %d outside 0..%d", gap, tt.kills)
				}
				for _, s := range shapes {
					got[s]++
				}
			}
			if got[shapeStepdown] != tt.stepdowns || got[shapeHandoff] != tt.handoffs {
				t.Errorf("planned %v, want %d stepdowns and %d handoffs", got, tt.stepdowns, tt.handoffs)
			}
			again := planShapes(rand.New(rand.NewPCG(7, 3)), tt.kills, tt.stepdowns, tt.handoffs)
			a, _ := json.Marshal(plan)
			b, _ := json.Marshal(again)
			if string(a) != string(b) {
				t.Errorf("one seed planned %s, then %s", a, b)
			}
		})
	}
	t.Run("a run without shapes draws nothing", func(t *testing.T) {
		rng := rand.New(rand.NewPCG(7, 3))
		planShapes(rng, 20, 0, 0)
		if got, want := rng.Uint64(), rand.New(rand.NewPCG(7, 3)).Uint64(); got != want {
			t.Errorf("the shapes' random stream moved: next %d, want %d", got, want)
		}
	})
}

func TestOneTurnPerCommand(t *testing.T) {
	one := turnID{request: "r1", stream: "s1"}
	sent := map[string][]sentChat{
		"chaos-chat-0": {
			{marker: "[chaos-chat-0 #0]", mode: modeRequest, acked: true, request: "r1", acks: []turnID{one, one, one}, sends: 3},
			{marker: "[chaos-chat-0 #1]", mode: modeKey, acked: true, request: "r2", acks: []turnID{{"r2", "s2"}, {"r3", "s3"}}, sends: 2},
			{marker: "[chaos-chat-0 #2]", mode: modeNone, sends: 1},
			{marker: "[chaos-chat-0 #3]", mode: modeMessage, acked: true, request: "r4", acks: []turnID{{"r4", "s4"}}, sends: 1},
		},
	}
	problems, st := oneTurnPerCommand(sent)
	if len(problems) != 1 || !strings.Contains(problems[0], "[chaos-chat-0 #1]") || !strings.Contains(problems[0], "request r3 stream s3") {
		t.Errorf("problems %q, want one naming the command #1 and its second turn", problems)
	}
	if got, want := st, (turnStats{acked: 3, resent: 2, answered: 2}); got != want {
		t.Errorf("stats %+v, want %+v", got, want)
	}
}

func TestStreamProblems(t *testing.T) {
	sent := []sentChat{
		{marker: "#0", acked: true, request: "r0", acks: []turnID{{"r0", "s0"}}},
		{marker: "#1", acked: true, request: "r1", acks: []turnID{{"r1", "s1"}}},
		{marker: "#2", acked: true, request: "r2", acks: []turnID{{"r2", "s2"}}},
		{marker: "#3", acked: true, request: "r3", acks: []turnID{{"r3", "s3"}}},
		{marker: "#5", acked: true, request: "r5", acks: []turnID{{"r5", "sx"}}},
		{marker: "#4", request: ""}, // never acknowledged: nothing to check
	}
	streams := []chathost.Stream{
		{Stream: "s0", RequestID: "r0", Status: chunk.StatusCompleted},
		{Stream: "s1", RequestID: "r1", Status: chunk.StatusError},
		{Stream: "s1b", RequestID: "r1", Status: chunk.StatusCompleted},
		{Stream: "s2", RequestID: "r2", Status: chunk.StatusStreaming},
		{Stream: "sx", Status: chunk.StatusError}, // no start chunk: verify's stream-start
	}
	problems := streamProblems("a", sent, streams)
	want := []string{"#1", "#2", "#3", "#5"} // two streams, never ended, none, one without its start
	if len(problems) != len(want) {
		t.Fatalf("problems %q, want one for each of %v", problems, want)
	}
	if !strings.Contains(problems[3], "stream sx has no start chunk") {
		t.Errorf("problem %q, want it to name the stream without its start", problems[3])
	}
	for i, w := range want {
		if !strings.Contains(problems[i], w) {
			t.Errorf("problem %d is %q, want it about %s", i, problems[i], w)
		}
	}
}

// TestStepdownLeader steps the leader of a replicated stream down on a
// real 3-node JetStream cluster, and finds a stream that does not exist
// refused.
func TestStepdownLeader(t *testing.T) {
	servers := eventlogtest.RunCluster(t, 3)
	nc := eventlogtest.Connect(t, servers[0])
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: eventlog.DefaultEventsStream, Subjects: []string{"chaos.test.>"}, Replicas: 3})
	if err != nil {
		t.Fatal(err)
	}
	leader := func() string {
		var name string
		waitfor.True(t, "the stream to have a leader", func() bool {
			info, err := st.Info(ctx)
			if ctx.Err() != nil {
				t.Fatal(ctx.Err())
			}
			if err == nil && info.Cluster != nil {
				name = info.Cluster.Leader
			}
			return name != ""
		})
		return name
	}
	before := leader()
	if err := stepdownLeader(ctx, nc, eventlog.DefaultEventsStream); err != nil {
		t.Fatalf("stepdown: %v", err)
	}
	waitfor.True(t, "a new leader", func() bool { return leader() != before })
	if err := stepdownLeader(ctx, nc, "NO_SUCH_STREAM"); err == nil {
		t.Error("stepdown of a stream that does not exist: no error")
	}
}

// TestResendRecordsEachAnswer resends a command in flight over a real NATS
// server whose responder answers 504, 503 and 409, then the turn's ids:
// the resend goes on past each, and its answer is recorded with the
// client's.
func TestResendRecordsEachAnswer(t *testing.T) {
	s := eventlogtest.RunServer(t, eventlogtest.ServerOptions{})
	nc := eventlogtest.Connect(t, s)
	var calls atomic.Int32
	if _, err := nc.Subscribe("forever.cmd.chaos-chat-0.chat", func(m *nats.Msg) {
		reply := nats.NewMsg(m.Reply)
		switch calls.Add(1) {
		case 1:
			reply.Header.Set("Nats-Service-Error-Code", "504")
			reply.Header.Set("Nats-Service-Error", "turn r1 is being confirmed; send the command again for its answer")
		case 2:
			reply.Header.Set("Nats-Service-Error-Code", "503")
		case 3:
			reply.Header.Set("Nats-Service-Error-Code", "409")
		default:
			if m.Header.Get("Idempotency-Key") != "k1" {
				reply.Header.Set("Nats-Service-Error-Code", "400")
			}
			reply.Data, _ = json.Marshal(chathost.Reply{RequestID: "r1", StreamID: "s1"})
		}
		m.RespondMsg(reply)
	}); err != nil {
		t.Fatal(err)
	}
	l := newLoad(time.Second)
	agent := "chaos-chat-0"
	l.mu.sent[agent] = []sentChat{{marker: "[chaos-chat-0 #0]", mode: modeKey}}
	l.mu.flights[agent] = &flight{agent: agent, idx: 0, key: "k1", cmd: map[string]any{"text": "hi"}, via: &client{nc: nc}}
	l.recordAck(agent, 0, chathost.Reply{RequestID: "r1", StreamID: "s1"}) // its client's answer

	if got := l.inFlight(rand.New(rand.NewPCG(1, 1))); got != agent {
		t.Errorf("in flight: %q, want %q", got, agent)
	}
	if n := l.resendInFlight(context.Background(), []*nats.Conn{nc}, "", time.Second); n != 1 {
		t.Fatalf("resent %d commands, want 1", n)
	}
	l.resends.Wait()
	got := l.mu.sent[agent][0]
	if got.sends != 4 || len(got.acks) != 2 || got.acks[1] != (turnID{"r1", "s1"}) {
		t.Errorf("sent %d times with answers %v, want 4 sends and the answer r1/s1 twice", got.sends, got.acks)
	}
	if len(l.mu.acked) != 1 {
		t.Errorf("acknowledged writes %v, want r1 once", l.mu.acked)
	}
	if problems, _ := oneTurnPerCommand(l.mu.sent); len(problems) != 0 {
		t.Errorf("problems %q, want none", problems)
	}
}

// TestShapesUsage refuses the shapes where they cannot run, before
// building or starting anything.
func TestShapesUsage(t *testing.T) {
	tests := []struct {
		name string
		args []string
	}{
		{name: "stepdowns on one node", args: []string{"-stepdowns", "1"}},
		{name: "handoffs on one node", args: []string{"-kills", "0", "-handoffs", "2"}},
		{name: "negative", args: []string{"-nodes", "3", "-stepdowns", "-1"}},
		{name: "stall agents on one node", args: []string{"-stall-agents", "4"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr strings.Builder
			if got, want := run(t.Context(), tt.args, &stdout, &stderr), 2; got != want {
				t.Fatalf("exit %d, want %d (stderr %q)", got, want, stderr.String())
			}
			if !strings.Contains(stderr.String(), "-stepdowns and -handoffs") {
				t.Errorf("stderr %q, want it to name the flags", stderr.String())
			}
		})
	}
}

// TestEventsStreamOf: the stepdown moves FOREVER_EVENTS's leader, and on a
// sharded cluster that of the shard of the agent just sent to.
func TestEventsStreamOf(t *testing.T) {
	for _, shards := range []int{0, 4} {
		lg, s := eventlogtest.Open(t, eventlog.Config{Shards: shards, Partitions: 8})
		nc := eventlogtest.Connect(t, s)
		want := lg.EventsStreams()[0]
		if shards > 0 {
			want = eventlog.ShardStreamName(eventlog.DefaultEventsStream, eventlog.PartitionOf("chat7", 8)%shards)
		}
		if got := eventsStreamOf(t.Context(), nc, "chat7"); got != want {
			t.Errorf("shards %d: stream of chat7 %q, want %q", shards, got, want)
		}
		if got := eventsStreamOf(t.Context(), nc, ""); got != lg.EventsStreams()[0] {
			t.Errorf("shards %d: stream without an agent %q", shards, got)
		}
	}
}
