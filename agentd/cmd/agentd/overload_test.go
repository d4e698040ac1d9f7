package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/forever-agents/forever/agentd/agentdtest"
	"github.com/forever-agents/forever/agentd/chathost"
	"github.com/forever-agents/forever/chat"
	"github.com/forever-agents/forever/chat/chunk"
	"github.com/forever-agents/forever/internal/waitfor"
)

// testBinaryOverload: 2,000 chats at once against --max-turns: the turns
// past the limit are refused at once with 429 and Retry-After (nothing
// stored for them), every admitted turn completes, memory stays bounded,
// and the goroutines come back down once they have.
func testBinaryOverload(t *testing.T, bin string) {
	const limit, chats = 20, 2000
	data := filepath.Join(t.TempDir(), "data")
	httpAddr, natsAddr := agentdtest.FreeAddr(t), agentdtest.FreeAddr(t)
	p := &agentdProc{out: &agentdtest.SyncBuffer{}, exited: make(chan error, 1)}
	p.cmd = exec.Command(bin, "--data", data, "--http", httpAddr, "--nats-listen", natsAddr,
		"--log-format", "json", "--local-rate", "100", "--max-turns", strconv.Itoa(limit))
	p.cmd.Env = os.Environ()
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	p = startWith(t, p, httpAddr)
	c := dialAgentd(t, natsAddr)

	type result struct {
		agent  string
		reply  chathost.Reply
		code   string
		retry  string
		errMsg string
	}
	results := make([]result, chats)
	var wg sync.WaitGroup
	for i := range chats {
		wg.Add(1)
		go func() {
			defer wg.Done()
			agent := fmt.Sprintf("load%d", i)
			r := result{agent: agent}
			msg, err := c.nc.Request("forever.cmd."+agent+".chat", []byte(`{"text":"Tell me a story about a lighthouse."}`), 30*time.Second)
			if err != nil {
				r.errMsg = err.Error()
			} else if r.code = msg.Header.Get("Nats-Service-Error-Code"); r.code != "" {
				r.retry, r.errMsg = msg.Header.Get("Retry-After"), msg.Header.Get("Nats-Service-Error")
			} else {
				json.Unmarshal(msg.Data, &r.reply)
			}
			results[i] = r
		}()
	}
	wg.Wait()
	var admitted, refused []result
	for _, r := range results {
		switch {
		case r.code == "" && r.errMsg == "":
			admitted = append(admitted, r)
		case r.code == "429" && r.retry != "" && strings.Contains(r.errMsg, "too many turns"),
			r.code == "503" && r.retry != "" && strings.Contains(r.errMsg, "commands in flight"):
			refused = append(refused, r)
		default:
			t.Errorf("%s: code %q retry %q: %s", r.agent, r.code, r.retry, r.errMsg)
		}
	}
	t.Logf("%d chats: %d admitted, %d refused with 429 or 503", chats, len(admitted), len(refused))
	if len(admitted) < limit || len(refused) == 0 {
		t.Fatalf("%d admitted, %d refused; want at least %d admitted and some refused", len(admitted), len(refused), limit)
	}
	for _, r := range admitted {
		chunks := waitTerminal(t, c, p, r.agent, r.reply.StreamID)
		if last := chunks[len(chunks)-1]; last.Type != chunk.Finish {
			t.Errorf("%s: admitted turn ended with %+v", r.agent, last)
		}
	}
	for _, r := range refused[:min(5, len(refused))] {
		var page struct{ Messages []chat.Message }
		json.Unmarshal(c.command(r.agent, "messages", nil), &page)
		if len(page.Messages) != 0 {
			t.Errorf("%s: a refused chat stored %d messages", r.agent, len(page.Messages))
		}
	}
	// The race detector takes 5-10x the memory: the bound is for a plain
	// build.
	if rss := metric(t, httpAddr, "process_resident_memory_bytes"); rss > 512<<20 && !raceEnabled {
		t.Errorf("resident memory after %d chats: %.0f MiB", chats, rss/(1<<20))
	} else {
		t.Logf("resident memory after %d chats: %.0f MiB", chats, rss/(1<<20))
	}
	// Goroutines come back down (idle agents are deactivated after 2m;
	// the turns' own goroutines end with them).
	waitfor.Within(t, 20*time.Second, func() error {
		g, running := metric(t, httpAddr, "go_goroutines"), metric(t, httpAddr, "forever_chat_turns_running")
		if running == 0 && g < 1500 {
			t.Logf("after the load: %.0f goroutines, %.0f turns running", g, running)
			return nil
		}
		return fmt.Errorf("after the load: %.0f goroutines, %.0f turns running", g, running)
	})
	if t.Failed() {
		t.Logf("agentd output:\n%s", p.out.String())
	}
}

// metric reads one unlabelled metric from agentd's /metrics.
func metric(t *testing.T, httpAddr, name string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + httpAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatal(err)
			}
			return f
		}
	}
	t.Fatalf("metric %s not found", name)
	return 0
}
