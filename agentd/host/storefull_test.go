package host_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/forever-agents/forever/agentd/agentdtest"
	"github.com/forever-agents/forever/agentd/host"
	"github.com/forever-agents/forever/internal/waitfor"
)

// pokeAgent counts the commands it handles, and writes nothing.
type pokeAgent struct{ handled *atomic.Int32 }

func (a pokeAgent) HandleCommand(context.Context, host.Command) (any, error) {
	a.handled.Add(1)
	return map[string]bool{"ok": true}, nil
}

// TestHostRefusesWritesWhileStoreFull: while the embedded server's store
// is full, a command that writes is refused with a 503 naming the full
// store before its agent handles it (in a cluster, its appends would wait
// for a stream that lost its leader); a read still answers; once space
// returns, the same command runs.
func TestHostRefusesWritesWhileStoreFull(t *testing.T) {
	cfg := agentdtest.Config(t)
	cfg.JetStreamMaxStore = 64 << 20
	var handled atomic.Int32
	d, _, nc, _ := startHostWith(t, cfg, host.Config{}, func(h *host.Host) error {
		return h.Register("poke", func(context.Context, *host.Env) (host.Agent, error) {
			return pokeAgent{&handled}, nil
		}, "poke")
	})
	if body, code := request(t, nc, "poke:a", "poke", []byte(`{}`)); code != "" || handled.Load() != 1 {
		t.Fatalf("poke with room: %s %s, handled %d", code, body, handled.Load())
	}

	js, _ := jetstream.New(nc)
	ctx := t.Context()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "BALLAST", Subjects: []string{"ballast"}, Storage: jetstream.FileStorage}); err != nil {
		t.Fatal(err)
	}
	big := make([]byte, 512<<10)
	for i := 0; ; i++ {
		if _, err := js.Publish(ctx, "ballast", big); err != nil {
			break
		}
		if i == 400 {
			t.Fatal("the store never filled")
		}
	}
	waitfor.True(t, "the daemon sees its store full", func() bool { return d.ServerStoreFull() != nil })

	body, code := request(t, nc, "poke:a", "poke", []byte(`{}`))
	if code != "503" || !strings.Contains(string(body), "storage full") {
		t.Errorf("poke with the store full: %s %s, want 503 storage full", code, body)
	}
	if n := handled.Load(); n != 1 {
		t.Errorf("the agent handled %d pokes, want 1: the one with the store full reached it", n)
	}
	if body, code := request(t, nc, "poke:a", "status", nil); code != "" {
		t.Errorf("status with the store full: %s %s, want an answer", code, body)
	}

	if err := js.DeleteStream(ctx, "BALLAST"); err != nil {
		t.Fatal(err)
	}
	waitfor.True(t, "the daemon sees room again", func() bool { return d.ServerStoreFull() == nil })
	deadline := time.Now().Add(waitfor.Bound)
	for {
		body, code := request(t, nc, "poke:a", "poke", []byte(`{}`))
		if code == "" {
			break
		}
		t.Logf("poke once space returned: %s %s", code, body)
		if time.Now().After(deadline) {
			t.Fatalf("poke once space returned: %s %s", code, body)
		}
		time.Sleep(100 * time.Millisecond) // not a synchronisation: the interval of a retry while the streams take writes again
	}
	if n := handled.Load(); n < 2 {
		t.Errorf("the agent handled %d pokes, want the one with room again too", n)
	}
}
