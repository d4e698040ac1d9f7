package host_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/forever-agents/forever/agentd"
	"github.com/forever-agents/forever/agentd/agentdtest"
	"github.com/forever-agents/forever/agentd/host"
	"github.com/forever-agents/forever/agents"
	"github.com/forever-agents/forever/fiber"
	"github.com/forever-agents/forever/internal/waitfor"
)

// counterAgent runs one fiber, "count", that stashes {"n":1} (version 1's
// format) or {"count":1} (version 2's) and waits until its process stops;
// version 2 migrates version 1's snapshots and records what it resumed.
type counterAgent struct {
	env     *host.Env
	resumed chan json.RawMessage
}

func (a *counterAgent) HandleCommand(ctx context.Context, cmd host.Command) (any, error) {
	if cmd.Verb != "start" {
		return nil, host.ErrNotFound
	}
	id, err := a.env.Fibers.Go(ctx, "count", func(ctx context.Context, f *fiber.Fiber) error {
		if err := fiber.Stash(ctx, json.RawMessage(`{"n":1}`)); err != nil {
			return err
		}
		<-ctx.Done()
		return ctx.Err()
	})
	return map[string]string{"fiber": id}, err
}

func (a *counterAgent) OnFiberRecovered(ctx context.Context, rec fiber.Recovered) error {
	return a.env.Fibers.GoResume(ctx, rec, func(ctx context.Context, f *fiber.Fiber) error {
		a.resumed <- rec.Snapshot
		return nil
	})
}

func (a *counterAgent) MigrateSnapshot(ctx context.Context, rec fiber.Recovered) (json.RawMessage, error) {
	var v1 struct{ N int }
	if err := json.Unmarshal(rec.Snapshot, &v1); err != nil {
		return nil, err
	}
	return json.Marshal(map[string]int{"count": v1.N})
}

// startVersion starts a daemon whose type "counter" has version v.
func startVersion(t *testing.T, cfg agentd.Config, v string, resumed chan json.RawMessage) (*nats.Conn, func() error) {
	t.Helper()
	d, err := agentd.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h := host.New(host.Config{})
	if err := h.Register("counter", func(_ context.Context, env *host.Env) (host.Agent, error) {
		return &counterAgent{env: env, resumed: resumed}, nil
	}, "start"); err != nil {
		t.Fatal(err)
	}
	if err := h.SetVersion("counter", host.TypeVersion{Version: v}); err != nil {
		t.Fatal(err)
	}
	if err := h.SetVersion("counter", host.TypeVersion{Version: v, Policy: "pin"}); !errors.Is(err, host.ErrBadRequest) {
		t.Fatalf("an unknown policy: %v", err)
	}
	if err := h.Attach(d); err != nil {
		t.Fatal(err)
	}
	stop := agentdtest.Start(t, d)
	agentdtest.WaitStatus(t, "http://"+d.HTTPAddr()+"/readyz", 200)
	nc, err := nats.Connect(d.NATSURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc, stop
}

func listVersion(t *testing.T, nc *nats.Conn, v string) []string {
	t.Helper()
	q, _ := json.Marshal(agents.Query{Version: v})
	msg, err := nc.Request(host.ListSubject("forever"), q, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var p agents.Page
	if err := json.Unmarshal(msg.Data, &p); err != nil {
		t.Fatalf("%s: %v", msg.Data, err)
	}
	var out []string
	for _, e := range p.Agents {
		out = append(out, e.Agent)
	}
	return out
}

// A rolling upgrade through the host: a fiber started by version 1 is
// listed under --version 1 and in status; a node of version 2 migrates
// its snapshot and resumes it, after which version 1 has drained.
func TestHostRollingUpgrade(t *testing.T) {
	cfg := agentdtest.Config(t)
	resumed := make(chan json.RawMessage, 1)
	nc, stop := startVersion(t, cfg, "1", resumed)
	if body, code := request(t, nc, "counter:a", "start", nil); code != "" {
		t.Fatalf("start: %s %s", code, body)
	}
	body, _ := request(t, nc, "counter:a", "status", nil)
	var st host.Status
	if err := json.Unmarshal(body, &st); err != nil {
		t.Fatal(err)
	}
	if st.Version != "1" || st.VersionPolicy != fiber.VersionContinue || len(st.WorkVersions) != 1 || st.WorkVersions[0] != "1" {
		t.Fatalf("status: %s", body)
	}
	if got := listVersion(t, nc, "1"); len(got) != 1 || got[0] != "counter:a" {
		t.Fatalf("agents --version 1: %v", got)
	}
	if got := listVersion(t, nc, "2"); len(got) != 0 {
		t.Fatalf("agents --version 2: %v", got)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	nc.Close()

	nc, _ = startVersion(t, cfg, "2", resumed)
	request(t, nc, "counter:a", "status", nil) // activates it: recovery runs
	select {
	case snap := <-resumed:
		if string(snap) != `{"count":1}` {
			t.Fatalf("version 2 resumed from %s", snap)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("not recovered")
	}
	waitfor.True(t, "version 1 to drain", func() bool { return len(listVersion(t, nc, "1")) == 0 })
}
