package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/forever-agents/forever/agentd/agentdtest"
	"github.com/forever-agents/forever/agentd/chathost"
	"github.com/forever-agents/forever/chat"
	"github.com/forever-agents/forever/internal/waitfor"
)

// testBinaryModelRateLimit: with --local-model-limit 1/2s the local model
// answers a second chat within 2 s with 429 and a Retry-After; the turn
// does not fail: status shows it waiting for the model's rate limit, the
// limiter holds the model's calls for the Retry-After (its metrics record
// the pause), and the turn completes.
func testBinaryModelRateLimit(t *testing.T, bin string) {
	data := filepath.Join(t.TempDir(), "data")
	httpAddr, natsAddr := agentdtest.FreeAddr(t), agentdtest.FreeAddr(t)
	p := &agentdProc{out: &agentdtest.SyncBuffer{}, exited: make(chan error, 1)}
	p.cmd = exec.Command(bin, "--data", data, "--http", httpAddr, "--nats-listen", natsAddr,
		"--local-rate", "-1", "--local-model-limit", "1/2s")
	p.cmd.Env = os.Environ()
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	startWith(t, p, httpAddr)
	nc, err := nats.Connect("nats://" + natsAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	const agent = "limited-a1"
	send := func(verb, payload string, out any) {
		t.Helper()
		m, err := nc.Request("forever.cmd."+agent+"."+verb, []byte(payload), 20*time.Second)
		if err != nil {
			t.Fatalf("%s: %v", verb, err)
		}
		if code := m.Header.Get("Nats-Service-Error-Code"); code != "" {
			t.Fatalf("%s: %s %s", verb, code, m.Data)
		}
		if out != nil {
			if err := json.Unmarshal(m.Data, out); err != nil {
				t.Fatalf("%s reply %s: %v", verb, m.Data, err)
			}
		}
	}
	turns := func(n int) {
		t.Helper()
		waitfor.NoError(t, func() error {
			var u chathost.UsageReply
			if send("usage", "", &u); u.Turns < n {
				return fmt.Errorf("%d turns recorded, have %d", n, u.Turns)
			}
			return nil
		})
	}
	send("chat", `{"text":"hello"}`, nil)
	turns(1)
	send("chat", `{"text":"hello again"}`, nil) // within the local model's 2 s window
	var wait *chat.ModelWait
	waitfor.True(t, "the status to show the turn waiting for the model's rate limit", func() bool {
		var st struct {
			Detail chat.Status `json:"detail"`
		}
		send("status", "", &st)
		if w := st.Detail.ModelWait; w != nil && w.RateLimited {
			wait = w
		}
		return wait != nil
	})
	if wait.Model != "local/local" || wait.RetryAfter < time.Second || wait.RetryAfter > 2*time.Second || wait.RetryAfter%time.Second != 0 {
		t.Fatalf("modelWait %+v, want local/local with a Retry-After of 1 or 2 s", wait)
	}
	turns(2)
	var st struct {
		Detail chat.Status `json:"detail"`
	}
	send("status", "", &st)
	if last := st.Detail; last.LastTurn == nil || last.LastTurn.Status != chat.TurnCompleted || last.ModelWait != nil {
		t.Fatalf("status after the wait %+v, want the last turn completed", last)
	}
	mresp, err := http.Get("http://" + httpAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(mresp.Body)
	mresp.Body.Close()
	for _, want := range []string{
		`forever_model_limiter_throttled_total{model="local/local"} 1`,
		fmt.Sprintf(`forever_model_limiter_paused_seconds_total{model="local/local"} %d`, wait.RetryAfter/time.Second),
		`forever_model_limiter_granted_total{tenant="default"} 3`,
	} {
		if !strings.Contains(string(metrics), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}
