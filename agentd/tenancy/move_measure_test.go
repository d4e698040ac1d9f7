package tenancy_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/forever-agents/forever/agentd/tenancy"
	"github.com/forever-agents/forever/eventlog"
)

// TestMeasureTenantMove times a tenant's move (its pause) by hand, not
// in CI: FOREVER_MOVE_EVENTS=50000 go test -v -run TestMeasureTenantMove
// ./agentd/tenancy/ writes that many events over 200 agents into an
// unsharded tenant's log on a node with 8 shards, moves it and logs the
// move's reply (tookMs, copyMs). Figures: docs/operations.md, "Moving a
// tenant into shards".
func TestMeasureTenantMove(t *testing.T) {
	n0, _ := strconv.Atoi(os.Getenv("FOREVER_MOVE_EVENTS"))
	if n0 < 200 {
		t.Skip("a measurement: set FOREVER_MOVE_EVENTS (at least 200) to run it")
	}
	var tenantShards atomic.Int64
	n := startNodeWith(t, 8, func() int { return int(tenantShards.Load()) }, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	n.create(t, tenancy.CreateRequest{Name: "acme"})
	var access tenancy.AccessReply
	n.must(t, tenancy.AdminAccessSubject, tenancy.AccessRequest{Tenants: []string{"acme"}}, &access)
	own := n.connect(t, access.Tenants[0].Creds)
	lg, err := eventlog.Open(ctx, eventlog.Config{Conn: own, Bind: true, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	agents := 200
	per := n0 / agents
	start := time.Now()
	for a := range agents {
		for b := 0; b < per; b += 100 {
			evs := make([]eventlog.Event, 0, 100)
			for i := 0; i < 100 && b+i < per; i++ {
				evs = append(evs, eventlog.Event{Agent: fmt.Sprintf("note:a%d", a), Type: "note.added", ID: fmt.Sprintf("e%d-%d", a, b+i), Time: time.Now(), Data: json.RawMessage(`{"text":"hello there, a note of some forty bytes"}`)})
			}
			if _, err := lg.AppendBatch(ctx, evs); err != nil {
				t.Fatal(err)
			}
		}
	}
	lg.Close()
	t.Logf("wrote %d events in %s", agents*per, time.Since(start))
	tenantShards.Store(8)
	t0 := time.Now()
	var mv tenancy.MoveReply
	n.must(t, tenancy.AdminMoveSubject, tenancy.RevokeRequest{Name: "acme"}, &mv)
	t.Logf("move: %s wall, tookMs %d copyMs %d, agents %d events %d chunks %d perShard %v", time.Since(t0), mv.TookMS, mv.CopyMS, mv.Agents, mv.Events, mv.Chunks, mv.PerShard)
}
