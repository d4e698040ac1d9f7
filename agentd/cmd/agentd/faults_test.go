package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/forever-agents/forever/agentd/agentdtest"
	"github.com/forever-agents/forever/agentd/chathost"
	"github.com/forever-agents/forever/chat"
	"github.com/forever-agents/forever/chat/chunk"
	"github.com/forever-agents/forever/internal/waitfor"
)

// clientBound is how long a client following a turn may wait after an
// operator fault before it must have its answer (an error, or the end).
// The longest wait is DeleteLeases': the lease TTL, the heal, then the
// recovered turn streams its whole reply again at --local-rate 15, 27 s
// after the deletion on a quiet machine (22 s of it the reply); at 30 s
// a loaded CI machine, which took 9 s to notice the deletion, failed it.
const clientBound = 60 * time.Second

// faultNode is a single agentd started for an operator-fault test: a slow
// local model, so a reply is still streaming when the fault comes.
type faultNode struct {
	t                       *testing.T
	bin, httpAddr, natsAddr string
	p                       *agentdProc
	c                       *crashClient
}

func startFaultNode(t *testing.T, bin string, extra ...string) *faultNode {
	data := filepath.Join(t.TempDir(), "data")
	n := &faultNode{t: t, bin: bin, httpAddr: agentdtest.FreeAddr(t), natsAddr: agentdtest.FreeAddr(t)}
	n.p = startAgentd(t, bin, data, n.httpAddr, n.natsAddr, append([]string{"--local-rate", "15"}, extra...)...)
	n.c = dialAgentd(t, n.natsAddr)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("agentd output:\n%s", n.p.out.String())
		}
	})
	return n
}

// turnClients follow one turn the way users do: the SSE response of the
// POST that started it, and `agentd tail` from the CLI.
type turnClients struct {
	sseDone chan []agentdtest.SSEEvent
	tail    *exec.Cmd
	tailOut bytes.Buffer
	tailErr bytes.Buffer
	tailRes chan error
}

// startTurn starts a long reply for agent over HTTP and follows it with SSE
// and with agentd tail, and returns once at least 10 chunks arrived.
func (n *faultNode) startTurn(agent string) *turnClients {
	t := n.t
	tc := &turnClients{sseDone: make(chan []agentdtest.SSEEvent, 1), tailRes: make(chan error, 1)}
	ctx, cancel := context.WithTimeout(context.Background(), 2*clientBound+30*time.Second)
	t.Cleanup(cancel)
	resp := agentdtest.Post(t, ctx, "http://"+n.httpAddr+"/v1/chat",
		`{"id":"`+agent+`","messages":[{"id":"u-`+agent+`","role":"user","parts":[{"type":"text","text":"Tell me a long story about a lighthouse keeper."}]}]}`)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST /v1/chat: %d", resp.StatusCode)
	}
	first := make(chan struct{})
	go func() {
		defer resp.Body.Close()
		var evs []agentdtest.SSEEvent
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		var once sync.Once
		for sc.Scan() {
			if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				evs = append(evs, agentdtest.SSEEvent{Data: d})
				if len(evs) >= 10 {
					once.Do(func() { close(first) })
				}
				if d == "[DONE]" {
					break
				}
			}
		}
		once.Do(func() { close(first) })
		tc.sseDone <- evs
	}()
	select {
	case <-first:
	case <-time.After(30 * time.Second):
		t.Fatal("the reply did not stream")
	}
	tc.tail = exec.Command(n.bin, "tail", agent, "--nats-url", "nats://"+n.natsAddr)
	tc.tail.Stdout, tc.tail.Stderr = &tc.tailOut, &tc.tailErr
	if err := tc.tail.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tc.tail.Process.Kill() })
	go func() { tc.tailRes <- tc.tail.Wait() }()
	time.Sleep(500 * time.Millisecond) // not a synchronisation: tail is subscribed before the fault, no observable condition (its output is read after it exits)
	return tc
}

// ended waits for both clients, each within clientBound, and returns the
// SSE events' chunk types, the tail's exit code and stderr.
func (tc *turnClients) ended(t *testing.T) (sse []string, tailCode int, tailErr string) {
	t.Helper()
	deadline := time.After(clientBound)
	select {
	case evs := <-tc.sseDone:
		for _, e := range evs {
			var c struct{ Type string }
			json.Unmarshal([]byte(e.Data), &c)
			if c.Type == "" {
				c.Type = e.Data
			}
			sse = append(sse, c.Type)
		}
	case <-deadline:
		t.Fatalf("the SSE client still waits %s after the fault", clientBound)
	}
	select {
	case err := <-tc.tailRes:
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			tailCode = ee.ExitCode()
		}
	case <-deadline:
		t.Fatalf("agentd tail still waits %s after the fault:\n%s", clientBound, tc.tailErr.String())
	}
	return sse, tailCode, tc.tailErr.String()
}

// watchReady polls /readyz every 50 ms until stop is closed, and returns
// every distinct 503 reason it saw, and every distinct degradation (a
// healed loss is listed there for a minute: a heal may end between two
// polls).
func (n *faultNode) watchReady(stop <-chan struct{}) <-chan []string {
	out := make(chan []string, 1)
	go func() {
		seen := map[string]bool{}
		var reasons []string
		for {
			select {
			case <-stop:
				out <- reasons
				return
			case <-time.After(50 * time.Millisecond):
			}
			h := readyz(n.t, n.httpAddr)
			var rs []string
			if h.code == http.StatusServiceUnavailable {
				rs = h.Reasons
			}
			for _, r := range append(rs, h.Degraded...) {
				if !seen[r] {
					seen[r] = true
					reasons = append(reasons, r)
				}
			}
		}
	}()
	return out
}

// waitReady waits for /readyz 200 with 64 partitions and returns how long
// it took.
func (n *faultNode) waitReady() time.Duration {
	start := time.Now()
	waitfor.Within(n.t, 60*time.Second, func() error {
		h := readyz(n.t, n.httpAddr)
		if h.code == http.StatusOK && h.Partitions == 64 {
			return nil
		}
		return fmt.Errorf("/readyz after the fault: %d %+v", h.code, h.Health)
	})
	return time.Since(start)
}

// chatCompletes sends a chat to agent (retrying 503s, as a client does) and
// waits for its reply to finish.
func (n *faultNode) chatCompletes(agent string) {
	n.t.Helper()
	var r chathost.Reply
	json.Unmarshal(n.c.command(agent, "chat", map[string]string{"text": "hello"}), &r)
	if cs := waitTerminal(n.t, n.c, n.p, agent, r.StreamID); cs[len(cs)-1].Type != chunk.Finish {
		n.t.Errorf("chat of %s after the fault ended with %+v", agent, cs[len(cs)-1])
	}
}

// checkLog checks agentd's output: want logged once at ERROR, and no
// line blaming another writer (one node cannot be fenced by another).
func (n *faultNode) checkLog(want string) {
	n.t.Helper()
	out := n.p.out.String()
	var hits []string
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, want) {
			hits = append(hits, l)
		}
		if strings.Contains(l, "another writer") || strings.Contains(l, "another node wrote") {
			n.t.Errorf("a single node blamed another writer: %s", l)
		}
	}
	if len(hits) != 1 || !strings.Contains(hits[0], `"level":"ERROR"`) {
		n.t.Errorf("want one ERROR line with %q, got %d:\n%s", want, len(hits), strings.Join(hits, "\n"))
	} else {
		n.t.Logf("logged: %s", hits[0])
	}
}

// testBinaryPurgeChunks: `nats stream purge FOREVER_CHUNKS` while a reply
// streams. The purge is logged once at ERROR with what it removed; the turn
// ends with an error chunk (its chunks are gone), so its SSE client and
// `agentd tail` end with an error instead of waiting; nothing blames
// another writer; and chats on the same agent and another one complete,
// without a restart.
func testBinaryPurgeChunks(t *testing.T, bin string) {
	n := startFaultNode(t, bin)
	clients := n.startTurn("p1")
	stop := make(chan struct{})
	seen := n.watchReady(stop)
	js, _ := jetstream.New(n.c.nc)
	s, err := js.Stream(t.Context(), "FOREVER_CHUNKS")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Purge(t.Context()); err != nil {
		t.Fatal(err)
	}
	purged := time.Now()
	sse, code, tailErr := clients.ended(t)
	t.Logf("clients ended %s after the purge: SSE %v; tail exit %d: %s", time.Since(purged).Round(time.Millisecond), tail(sse, 3), code, strings.TrimSpace(tailErr))
	if !contains(sse, "error") {
		t.Errorf("the SSE client got no error chunk: %v", tail(sse, 5))
	}
	if code == 0 || !strings.Contains(tailErr, "turn failed") {
		t.Errorf("agentd tail exit %d, stderr %q: want a failure naming the turn", code, tailErr)
	}
	n.waitReady()
	n.chatCompletes("p1")
	n.chatCompletes("p2")
	close(stop)
	t.Logf("/readyz reasons seen: %q", <-seen)
	n.checkLog("stream FOREVER_CHUNKS was purged under the running node")
}

// testBinaryDeleteEvents: `nats stream rm FOREVER_EVENTS` while a reply
// streams. Within seconds /readyz names the stream (503 while it is
// healed, then a degradation for a minute), the loss is
// logged once at ERROR, the stream is created again and the views rebuilt
// from it (the conversation is gone, and status says so), the turn ends
// with an error chunk so its clients end with an error, and new chats
// complete, without a restart.
func testBinaryDeleteEvents(t *testing.T, bin string) {
	n := startFaultNode(t, bin)
	clients := n.startTurn("d1")
	stop := make(chan struct{})
	seen := n.watchReady(stop)
	js, _ := jetstream.New(n.c.nc)
	if err := js.DeleteStream(t.Context(), "FOREVER_EVENTS"); err != nil {
		t.Fatal(err)
	}
	deleted := time.Now()
	sse, code, tailErr := clients.ended(t)
	t.Logf("clients ended %s after the deletion: SSE %v; tail exit %d: %s", time.Since(deleted).Round(time.Millisecond), tail(sse, 3), code, strings.TrimSpace(tailErr))
	if !contains(sse, "error") {
		t.Errorf("the SSE client got no error chunk: %v", tail(sse, 5))
	}
	if code == 0 || !strings.Contains(tailErr, "turn failed") {
		t.Errorf("agentd tail exit %d, stderr %q: want a failure naming the turn", code, tailErr)
	}
	t.Logf("ready again %s after the deletion", (n.waitReady() + time.Since(deleted)).Round(time.Millisecond))
	close(stop)
	reasons := <-seen
	t.Logf("/readyz reasons seen: %q", reasons)
	// A heal can end between two polls (it takes 25 ms on a quiet
	// machine, since a follow no longer waits for its consumer's
	// re-create): the healed loss is then listed as a degradation for a
	// minute.
	waitfor.Within(t, 10*time.Second, func() error {
		h := readyz(t, n.httpAddr)
		if r := append(append(reasons, h.Reasons...), h.Degraded...); !containsSub(r, "stream FOREVER_EVENTS was deleted") {
			return fmt.Errorf("/readyz never named the deleted stream, as a reason or a healed loss: %q", r)
		}
		return nil
	})
	var page struct{ Messages []chat.Message }
	json.Unmarshal(n.c.command("d1", "messages", nil), &page)
	if len(page.Messages) != 0 {
		t.Errorf("the conversation after its events were deleted: %+v, want none", page.Messages)
	}
	n.chatCompletes("d1")
	n.chatCompletes("d2")
	n.checkLog("stream FOREVER_EVENTS was deleted under the running node")
	if v := metric(t, n.httpAddr, `forever_agentd_store_faults_total{kind="deleted",store="FOREVER_EVENTS"}`); v != 1 {
		t.Errorf("forever_agentd_store_faults_total{FOREVER_EVENTS,deleted} = %v, want 1", v)
	}
}

// testBinaryDeleteLeases: `nats kv del --bucket FOREVER_LEASES` (the whole
// bucket) while a reply streams. The node stops serving at once, /readyz is
// 503 naming the bucket for a lease TTL (until no node can still serve a
// lease of the lost bucket), the bucket is created again, the node takes
// its partitions back and recovers the turn, which completes; its clients
// see it complete, and new chats complete, without a restart.
func testBinaryDeleteLeases(t *testing.T, bin string) {
	n := startFaultNode(t, bin, "--lease-ttl", "3s")
	clients := n.startTurn("l1")
	stop := make(chan struct{})
	seen := n.watchReady(stop)
	js, _ := jetstream.New(n.c.nc)
	if err := js.DeleteKeyValue(t.Context(), "FOREVER_LEASES"); err != nil {
		t.Fatal(err)
	}
	deleted := time.Now()
	sse, code, tailErr := clients.ended(t)
	t.Logf("clients ended %s after the deletion: SSE %v; tail exit %d: %s", time.Since(deleted).Round(time.Millisecond), tail(sse, 3), code, strings.TrimSpace(tailErr))
	if !contains(sse, "finish") || code != 0 {
		t.Errorf("the turn did not complete for its clients: SSE %v, tail exit %d %q", tail(sse, 5), code, tailErr)
	}
	n.waitReady()
	close(stop)
	reasons := <-seen
	t.Logf("/readyz reasons seen: %q", reasons)
	if !containsSub(reasons, "bucket FOREVER_LEASES") {
		t.Errorf("/readyz never named the lease bucket: %q", reasons)
	}
	n.chatCompletes("l1")
	n.chatCompletes("l2")
	n.checkLog("bucket FOREVER_LEASES was deleted under the running node")
	var st struct{ Owner string }
	json.Unmarshal(n.c.command("l1", "status", nil), &st)
	if st.Owner == "" {
		t.Errorf("status of l1 names no owner after the bucket was restored")
	}
	verifyLog(t, n.c)
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

func containsSub(xs []string, sub string) bool {
	for _, y := range xs {
		if strings.Contains(y, sub) {
			return true
		}
	}
	return false
}

func tail(xs []string, n int) []string { return xs[max(0, len(xs)-n):] }
