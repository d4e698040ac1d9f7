package agentd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/eventlog/eventlogtest"
	"github.com/forever-agents/forever/ownership"
)

// TestShardsMoveLock: a move of a cluster started while another runs is
// refused with ErrShardsMoveRunning naming the first's process, and leaves
// the cluster alone; the first completes and lets its lock go, so the next
// move runs (and finds the log moved).
func TestShardsMoveLock(t *testing.T) {
	ctx := t.Context()
	s := eventlogtest.RunServer(t, eventlogtest.ServerOptions{})
	lg := eventlogtest.OpenOn(t, s, eventlog.Config{})
	for i := range 4 {
		if _, err := lg.Append(ctx, eventlog.Event{Agent: fmt.Sprint("a", i), Type: "tick", Data: json.RawMessage(`1`)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := lg.Close(); err != nil {
		t.Fatal(err)
	}
	nc := eventlogtest.Connect(t, s)
	var second error
	first, err := moveToShards(ctx, nc, 2, 8, nil, func() {
		_, second = MoveToShards(ctx, eventlogtest.Connect(t, s), 2, 8, nil)
	})
	if err != nil {
		t.Fatalf("the first move: %v", err)
	}
	if first.Agents != 4 || first.Finished {
		t.Errorf("the first move: %+v, want 4 agents moved", first)
	}
	if !errors.Is(second, ErrShardsMoveRunning) || !strings.Contains(second.Error(), fmt.Sprintf("(pid %d) since ", os.Getpid())) {
		t.Fatalf("a move while another runs: %v; want ErrShardsMoveRunning naming the first's process", second)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, ownership.DefaultBucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Get(ctx, shardsMoveLockKey); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Errorf("the move's lock after the move: %v, want it deleted", err)
	}
	again, err := MoveToShards(context.WithoutCancel(ctx), nc, 2, 8, nil)
	if err != nil || !again.Finished {
		t.Errorf("a move after the first: %+v, %v; want it to find the log moved", again, err)
	}
}
