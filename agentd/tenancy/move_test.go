package tenancy_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/forever-agents/forever/agentd"
	"github.com/forever-agents/forever/agentd/demo"
	"github.com/forever-agents/forever/agentd/host"
	"github.com/forever-agents/forever/agentd/tenancy"
	"github.com/forever-agents/forever/auth"
	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/internal/waitfor"
	"github.com/forever-agents/forever/ownership"
	"github.com/forever-agents/forever/verify"
)

// TestMoveTenant: a tenant whose log was created unsharded (as a release
// before tenants' shards created it) on a node with 2 shards is moved into
// them by the admin's move: every agent's events are kept, in order, with
// their writers and epochs; a fiber running across the move ends, each
// step completed once; its streams quota, set to what it used unsharded, holds
// during the copy and after; the unsharded streams are gone; verify is
// clean; its client reads a chunks shard through the forwarder; its usage
// counts the log as two streams; a second move has nothing to do. Another
// tenant's move is refused while a move of it runs (its lock), and while
// a node keeps its heartbeat (a node of an earlier release), which
// resumes it with its log untouched.
func TestMoveTenant(t *testing.T) {
	var tenantShards atomic.Int64 // 0: tenants' new logs unsharded
	n := startNodeWith(t, 2, func() int { return int(tenantShards.Load()) }, 5*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	created := n.create(t, tenancy.CreateRequest{Name: "acme", Cred: "ci"})
	client := n.connect(t, created.Creds)
	n.create(t, tenancy.CreateRequest{Name: "beta"})
	var access tenancy.AccessReply
	n.must(t, tenancy.AdminAccessSubject, tenancy.AccessRequest{Tenants: []string{"acme", "beta"}}, &access)
	own := n.connect(t, access.Tenants[0].Creds) // agentd's user in acme's account
	ojs, err := jetstream.New(own)
	if err != nil {
		t.Fatal(err)
	}
	bjs, err := jetstream.New(n.connect(t, access.Tenants[1].Creds))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ojs.Stream(ctx, eventlog.DefaultEventsStream); err != nil {
		t.Fatalf("acme's log is not unsharded before the move: %v", err)
	}
	// Its streams quota is what it uses: the copy needs the room the move
	// gives (the unsharded pair beside the shards).
	ai, err := ojs.AccountInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	n.create(t, tenancy.CreateRequest{Name: "acme", Quota: auth.Quota{Streams: int64(ai.Streams)}})

	cmd := func(agent, verb, data string) []byte {
		t.Helper()
		m, err := client.Request("forever.cmd."+agent+"."+verb, []byte(data), 20*time.Second)
		if err != nil || m.Header.Get("Nats-Service-Error-Code") != "" {
			t.Fatalf("%s %s: %v %s", agent, verb, err, m.Data)
		}
		return m.Data
	}
	events := func(agent string) []host.LogEvent {
		t.Helper()
		var p host.LogPage
		if err := json.Unmarshal(cmd(agent, "log", `{"limit":1000}`), &p); err != nil {
			t.Fatal(err)
		}
		return p.Events
	}
	count := func(evs []host.LogEvent, typ string) int {
		n := 0
		for _, e := range evs {
			if e.Type == typ {
				n++
			}
		}
		return n
	}
	cmd("steps:done", "start", `{"steps":3,"delayMs":0}`)
	waitfor.True(t, "steps:done's fiber to complete", func() bool { return count(events("steps:done"), "fiber.completed") == 1 })
	// A fiber that runs across the move: steps spaced so the move starts
	// while it runs.
	cmd("steps:running", "start", `{"steps":8,"delayMs":150}`)
	waitfor.True(t, "steps:running's first step", func() bool { return count(events("steps:running"), "steps.executed") > 0 })
	before := events("steps:done")

	stepsBefore := count(events("steps:running"), "steps.executed")
	tenantShards.Store(2) // a new tenant now would take the node's shards
	var mv tenancy.MoveReply
	n.must(t, tenancy.AdminMoveSubject, tenancy.RevokeRequest{Name: "acme"}, &mv)
	if !mv.Moved || mv.Shards != 2 || mv.Agents != 2 || mv.Events == 0 || len(mv.PerShard) != 2 {
		t.Fatalf("move: %+v, want 2 agents' events moved into 2 shards", mv)
	}

	t.Logf("moved in %d ms: %d events, %d chunks, per shard %v; steps:running had run %d of 8 steps before",
		mv.TookMS, mv.Events, mv.Chunks, mv.PerShard, stepsBefore)
	// The history of steps:done is kept: types, ids, writers and epochs in
	// order (sequences change).
	after := events("steps:done")
	key := func(evs []host.LogEvent) []string {
		var out []string
		for _, e := range evs {
			w := ""
			if e.Writer != nil {
				w = fmt.Sprintf("%s/%d", e.Writer.Node, e.Writer.Epoch)
			}
			out = append(out, e.Type+" "+e.ID+" "+w+" "+string(e.Data))
		}
		return out
	}
	if !slices.Equal(key(before), key(after)) {
		t.Errorf("steps:done's log after the move:\n%s\nwant as before:\n%s", strings.Join(key(after), "\n"), strings.Join(key(before), "\n"))
	}
	// The running fiber ends.
	waitfor.True(t, "steps:running's fiber to complete after the move", func() bool {
		return count(events("steps:running"), "fiber.completed") == 1
	})
	// Each step completed once; each ran at least once (one the move
	// interrupted runs again, as after any stop of its daemon: a step's
	// side effect is at least once).
	evs := events("steps:running")
	ran := map[int]bool{}
	for _, e := range evs {
		var x demo.StepExecuted
		if e.Type == demo.EventStepExecuted && json.Unmarshal(e.Data, &x) == nil {
			ran[x.Step] = true
		}
	}
	if got := count(evs, "op.completed"); got != 8 || len(ran) != 8 {
		t.Errorf("steps:running: %d steps completed, %d distinct steps ran, want 8 and 8", got, len(ran))
	}

	// The layout: shards, no unsharded streams, within the quota's room.
	for _, name := range []string{eventlog.DefaultEventsStream, eventlog.DefaultChunksStream} {
		if _, err := ojs.Stream(ctx, name); !errors.Is(err, jetstream.ErrStreamNotFound) {
			t.Errorf("%s after the move: %v, want gone", name, err)
		}
		for k := range 2 {
			if _, err := ojs.Stream(ctx, eventlog.ShardStreamName(name, k)); err != nil {
				t.Errorf("shard %d of %s: %v", k, name, err)
			}
		}
	}
	lg, err := eventlog.Open(ctx, eventlog.Config{Conn: own, Bind: true, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer lg.Close()
	rep, err := verify.Check(ctx, lg, verify.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() {
		t.Errorf("verify after the move:\n%s", rep)
	}

	// The move let its lock go.
	if kv, err := ojs.KeyValue(ctx, ownership.DefaultBucket); err != nil {
		t.Fatal(err)
	} else if _, err := kv.Get(ctx, "tenant-move"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Errorf("acme's move lock after the move: %v, want it deleted", err)
	}

	// The client's API calls reach a chunks shard through the forwarder.
	cjs, err := jetstream.NewWithAPIPrefix(client, auth.ClientAPIPrefix)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cjs.Stream(ctx, eventlog.ShardStreamName(eventlog.DefaultChunksStream, 1)); err != nil {
		t.Errorf("the client's info of FOREVER_CHUNKS_1: %v", err)
	}

	// Its usage: 2 agents, the log counted as two streams, within the quota.
	admin, _, err := agentd.AdminToken(n.d.Config(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	tenants := func() map[string]tenancy.TenantInfo {
		t.Helper()
		code, body, _ := n.get(t, "/v1/tenants", admin)
		var list struct{ Tenants []tenancy.TenantInfo }
		if err := json.Unmarshal([]byte(body), &list); code != http.StatusOK || err != nil || len(list.Tenants) != 2 {
			t.Fatalf("GET /v1/tenants: %d %s (%v)", code, body, err)
		}
		out := map[string]tenancy.TenantInfo{}
		for _, ti := range list.Tenants {
			out[ti.Name] = ti
		}
		return out
	}
	if u := tenants()["acme"].Usage; u == nil || u.Agents != 2 || u.Streams != ai.Streams {
		t.Errorf("acme's usage after the move: %+v, want 2 agents and %d streams (as before it)", u, ai.Streams)
	}

	// Nothing left to do.
	var again tenancy.MoveReply
	n.must(t, tenancy.AdminMoveSubject, tenancy.RevokeRequest{Name: "acme"}, &again)
	if again.Moved || again.Finished || again.Shards != 2 {
		t.Errorf("a second move: %+v, want nothing done", again)
	}

	// A node that keeps serving a tenant (one of a release that does not
	// know the move: here its heartbeat key in beta's lease bucket) makes
	// beta's move refuse, naming it, and resume beta, its log untouched.
	leases, err := bjs.KeyValue(ctx, ownership.DefaultBucket)
	if err != nil {
		t.Fatal(err)
	}
	// A move of beta that runs (its lock in beta's lease bucket) makes a
	// second one refuse at once, before it stops beta.
	if _, err := leases.Create(ctx, "tenant-move", []byte("node-x since now"), jetstream.KeyTTL(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if code, body := n.request(t, tenancy.AdminMoveSubject, tenancy.RevokeRequest{Name: "beta"}); code != "409" || !strings.Contains(string(body), "runs (on node-x since now)") {
		t.Errorf("beta's move while another runs: %s %s, want 409 naming it", code, body)
	}
	if b := tenants()["beta"]; b.Moving || !b.Served {
		t.Errorf("beta after a move refused for another: %+v, want it served, not moving", b)
	}
	if err := leases.Delete(ctx, "tenant-move"); err != nil {
		t.Fatal(err)
	}
	if _, err := leases.Put(ctx, "node.earlier-release", []byte("{}")); err != nil {
		t.Fatal(err)
	}
	if code, body := n.request(t, tenancy.AdminMoveSubject, tenancy.RevokeRequest{Name: "beta"}); code != "409" || !strings.Contains(string(body), "earlier-release") {
		t.Errorf("beta's move while a node serves it: %s %s, want 409 naming the node", code, body)
	}
	if st, err := bjs.Stream(ctx, eventlog.DefaultEventsStream); err != nil || !slices.Equal(st.CachedInfo().Config.Subjects, []string{"forever.evt.>"}) {
		t.Errorf("beta's events stream after the refused move: %v, want its subjects as they were", err)
	}
	if b := tenants()["beta"]; b.Moving {
		t.Errorf("beta after the refused move: %+v, want it not moving", b)
	}
}
