package main

import (
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/forever-agents/forever/agentd"
	"github.com/forever-agents/forever/agentd/agentdtest"
	"github.com/forever-agents/forever/agentd/chathost"
	"github.com/forever-agents/forever/chat"
	"github.com/forever-agents/forever/chat/chunk"
)

// readAnswer is how long a read command may take from any node under a
// full store: what the README promises.
const readAnswer = 2 * time.Second

// storeFullTTL is the lease TTL of the full-store tests: short, so that a
// lease bucket a full store could stop would lose its leases quickly.
const storeFullTTL = 3 * time.Second

// testBinaryDiskFull: the built binary with a small JetStream store
// (--js-max-store) that another stream fills: a new chat is refused at once
// with 503 and Retry-After (over NATS and HTTP) naming the full store;
// the node keeps its partitions (the lease bucket is in the memory store),
// /readyz stays 200 and lists the full store under degraded; status,
// fibers, schedules and messages answer within 2 s; reads and replay of an
// earlier chat go on; once space returns a chat is served again without a
// restart; and the log verifies clean.
func testBinaryDiskFull(t *testing.T, bin string) {
	data := filepath.Join(t.TempDir(), "data")
	httpAddr, natsAddr := agentdtest.FreeAddr(t), agentdtest.FreeAddr(t)
	p := startAgentd(t, bin, data, httpAddr, natsAddr, "--local-rate", "-1", "--js-max-store", "48MiB",
		"--lease-ttl", storeFullTTL.String())
	c := dialAgentd(t, natsAddr)
	defer func() {
		if t.Failed() {
			t.Logf("agentd output:\n%s", p.out.String())
		}
	}()

	var first chathost.Reply
	json.Unmarshal(c.command("before", "chat", map[string]string{"text": "hello"}), &first)
	before := waitTerminal(t, c, p, "before", first.StreamID)

	fillStore(t, c.nc, 1)
	// Longer than a lease TTL: a lease the full store could not renew is
	// gone by now.
	time.Sleep(2 * storeFullTTL) // not a synchronisation: the point, longer than a lease TTL so an unrenewed lease is gone
	h := readyz(t, httpAddr)
	t.Logf("/readyz with the store full: %+v", h)
	if h.code != http.StatusOK || h.Partitions != 64 || len(h.Degraded) == 0 || !strings.Contains(h.Degraded[0], "JetStream store full") {
		t.Errorf("/readyz with the store full: %d %+v, want 200 with 64 partitions and the full store under degraded", h.code, h.Health)
	}
	if v := metric(t, httpAddr, `forever_agentd_degraded{reason="store_full"}`); v != 1 {
		t.Errorf("forever_agentd_degraded{reason=\"store_full\"} = %v, want 1", v)
	}
	readsAnswer(t, c.nc, "before")

	msg, err := c.nc.Request("forever.cmd.during.chat", []byte(`{"text":"hello"}`), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if code, text := msg.Header.Get("Nats-Service-Error-Code"), msg.Header.Get("Nats-Service-Error"); code != "503" || msg.Header.Get("Retry-After") == "" || !strings.Contains(text, "storage full") {
		t.Errorf("chat with the store full: code %q retry %q: %s, want 503 storage full with Retry-After", code, msg.Header.Get("Retry-After"), text)
	}
	ctx := t.Context()
	resp := agentdtest.Post(t, ctx, "http://"+httpAddr+"/v1/chat", `{"id":"during2","messages":[{"id":"u1","role":"user","parts":[{"type":"text","text":"hi"}]}]}`)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" || !strings.Contains(string(b), "storage full") {
		t.Errorf("HTTP chat with the store full: %d retry %q %s", resp.StatusCode, resp.Header.Get("Retry-After"), b)
	}
	// Reads and replay go on.
	var page struct{ Messages []chat.Message }
	json.Unmarshal(c.command("before", "messages", nil), &page)
	if len(page.Messages) != 2 {
		t.Errorf("messages of the earlier chat with the store full: %+v", page.Messages)
	}
	if got := c.streamChunks("before", first.StreamID); len(got) != len(before) {
		t.Errorf("replay with the store full: %d chunks, want %d", len(got), len(before))
	}

	// Space returns: served again, no restart.
	js, _ := jetstream.New(c.nc)
	if err := js.DeleteStream(ctx, "BALLAST"); err != nil {
		t.Fatal(err)
	}
	var after chathost.Reply
	json.Unmarshal(c.command("during", "chat", map[string]string{"text": "hello again"}), &after)
	if cs := waitTerminal(t, c, p, "during", after.StreamID); cs[len(cs)-1].Type != chunk.Finish {
		t.Errorf("chat after space returned ended with %+v", cs[len(cs)-1])
	}
	if h := readyz(t, httpAddr); h.code != http.StatusOK || len(h.Degraded) != 0 {
		t.Errorf("/readyz after space returned: %d %+v, want 200 and nothing degraded", h.code, h.Health)
	}
	select {
	case err := <-p.exited:
		t.Fatalf("agentd exited: %v", err)
	default:
	}
	verifyLog(t, c)
}

// fillStore fills the JetStream store of the server nc is connected to (of
// every server, with replicas 3) with a stream BALLAST until it refuses.
func fillStore(t *testing.T, nc *nats.Conn, replicas int) {
	t.Helper()
	ctx := t.Context()
	js, _ := jetstream.New(nc)
	ballast, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "BALLAST", Subjects: []string{"ballast"},
		Storage: jetstream.FileStorage, Replicas: replicas})
	if err != nil {
		t.Fatal(err)
	}
	big := make([]byte, 512<<10)
	var perr error
	for range 400 {
		if _, perr = js.Publish(ctx, "ballast", big); perr != nil {
			break
		}
	}
	info, _ := ballast.Info(ctx)
	t.Logf("ballast: %d MiB, then %v", info.State.Bytes>>20, perr)
	if perr == nil {
		t.Fatal("the store never filled")
	}
}

// readyzBody is /readyz's answer with its status code.
type readyzBody struct {
	code int
	agentd.Health
}

func readyz(t *testing.T, httpAddr string) readyzBody {
	t.Helper()
	resp, err := http.Get("http://" + httpAddr + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var h readyzBody
	h.code = resp.StatusCode
	json.NewDecoder(resp.Body).Decode(&h.Health)
	return h
}

// readsAnswer checks that status, fibers, schedules and messages of agent
// answer, each within readAnswer, through nc.
func readsAnswer(t *testing.T, nc *nats.Conn, agent string) {
	t.Helper()
	for _, verb := range []string{"status", "fibers", "schedules", "messages"} {
		start := time.Now()
		msg, err := nc.Request("forever.cmd."+agent+"."+verb, nil, 10*time.Second)
		took := time.Since(start)
		switch {
		case err != nil:
			t.Errorf("%s of %s: %v after %s", verb, agent, err, took)
		case msg.Header.Get("Nats-Service-Error-Code") != "":
			t.Errorf("%s of %s: %s %s", verb, agent, msg.Header.Get("Nats-Service-Error-Code"), msg.Data)
		case took > readAnswer:
			t.Errorf("%s of %s answered after %s, want within %s", verb, agent, took, readAnswer)
		default:
			t.Logf("%s of %s answered in %s", verb, agent, took.Round(time.Millisecond))
		}
	}
}
