package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/forever-agents/forever/agentd"
	"github.com/forever-agents/forever/agentd/agentdtest"
	"github.com/forever-agents/forever/agentd/chathost"
	"github.com/forever-agents/forever/chat"
	"github.com/forever-agents/forever/internal/waitfor"
)

// TestBinaryTenantBudget: under --auth, a tenant created with
// --token-budget 600/24h answers chats of two agents until their usage
// together passes 600 tokens; then both agents' chats get 402 over NATS
// and HTTP naming the tenant's budget, its period and its reset, and
// budget (read) shows the tenant's spend equal to the sum of both agents'
// usage. A tenant with --user-token-budget 600/24h does the same for two
// agents of one user, while another user's agent goes on.
func TestBinaryTenantBudget(t *testing.T) {
	parallel(t, light, 15)
	bin := buildBinary(t)
	dir := t.TempDir()
	data, out := filepath.Join(dir, "data"), filepath.Join(dir, "out")
	httpAddr, natsAddr := agentdtest.FreeAddr(t), agentdtest.FreeAddr(t)
	natsURL := "nats://" + natsAddr
	startAgentd(t, bin, data, httpAddr, natsAddr, "--auth", "--local-rate", "-1")
	admin := filepath.Join(data, agentd.AdminCredsFile)

	if _, stderr, code := tenantCLI(t, bin, "create", "bad", "--token-budget", "600", "--nats-url", natsURL, "--creds", admin, "--out", out); code != 2 || !strings.Contains(stderr, "<amount>/<period>") {
		t.Fatalf("--token-budget 600: exit %d %s", code, stderr)
	}
	stdout, stderr, code := tenantCLI(t, bin, "create", "spend", "--token-budget", "600/24h", "--nats-url", natsURL, "--creds", admin, "--out", out)
	if code != 0 || !strings.Contains(stdout, `"budget":{"tokens":{"n":600,"period":"24h"}}`) {
		t.Fatalf("tenant create spend: exit %d %s %s", code, stdout, stderr)
	}
	var spend tenantCred
	if err := json.Unmarshal([]byte(stdout), &spend); err != nil {
		t.Fatal(err)
	}
	people := createTenant(t, bin, natsURL, admin, out, "people", "--user-token-budget", "600/24h")

	t.Run("Tenant", func(t *testing.T) {
		nc := connectCreds(t, natsURL, spend.Creds)
		used := chatUntil(t, nc, []string{"a1", "a2"}, "", 600)
		for _, agent := range []string{"a1", "a2"} {
			code, body := budgetCmd(t, nc, agent, "chat", `{"text":"one more"}`, nil)
			if code != "402" || !strings.Contains(body, "tenant spend's token budget of 600 tokens per 24h") || !strings.Contains(body, "resets at") {
				t.Fatalf("chat of %s past the tenant's budget: %s %s", agent, code, body)
			}
		}
		req, _ := http.NewRequest(http.MethodPost, "http://"+httpAddr+"/v1/chat",
			strings.NewReader(`{"id":"a2","messages":[{"id":"u-over","role":"user","parts":[{"type":"text","text":"one more"}]}]}`))
		req.Header.Set("Authorization", "Bearer "+spend.Token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		hb, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusPaymentRequired || resp.Header.Get("Retry-After") == "" || !strings.Contains(string(hb), "tenant spend's") {
			t.Fatalf("chat past the tenant's budget over HTTP: %d %v %s", resp.StatusCode, resp.Header, hb)
		}
		var st chat.BudgetStatus
		if code, body := budgetCmd(t, nc, "a1", "budget", "", &st); code != "" {
			t.Fatalf("budget: %s %s", code, body)
		}
		if len(st.Shared) != 1 || st.Shared[0].Scope != "tenant" || st.Shared[0].Name != "spend" || st.Shared[0].Spent.Tokens != used || st.Shared[0].Exceeded != "tokens" {
			t.Fatalf("budget of a1 = %+v, want the tenant's with %d tokens spent", st.Shared, used)
		}
	})

	t.Run("User", func(t *testing.T) {
		nc := connectCreds(t, natsURL, people.Creds)
		used := chatUntil(t, nc, []string{"u1", "u2"}, "alice", 600)
		code, body := budgetCmd(t, nc, "u2", "chat", `{"text":"one more"}`, nil)
		if code != "402" || !strings.Contains(body, "user alice's token budget of 600 tokens per 24h") {
			t.Fatalf("chat of u2 past alice's budget: %s %s", code, body)
		}
		if code, body := budgetCmd(t, nc, "v1", "chat", `{"text":"hello","meta":{"user":"bob"}}`, nil); code != "" {
			t.Fatalf("bob's agent refused: %s %s", code, body)
		}
		var st chat.BudgetStatus
		if code, body := budgetCmd(t, nc, "u1", "budget", "", &st); code != "" {
			t.Fatalf("budget: %s %s", code, body)
		}
		if len(st.Shared) != 1 || st.Shared[0].Scope != "user" || st.Shared[0].Name != "alice" || st.Shared[0].Spent.Tokens != used {
			t.Fatalf("budget of u1 = %+v, want alice's with %d tokens spent", st.Shared, used)
		}
	})
}

// TestBinaryUserBudget: a daemon without --auth given --user-token-budget
// 600/24h refuses the chats of a user's agents once their usage together
// passes 600 tokens, with 402 naming the user's budget; another user's
// agent goes on.
func TestBinaryUserBudget(t *testing.T) {
	parallel(t, light, 2)
	bin := buildBinary(t)
	data := filepath.Join(t.TempDir(), "data")
	httpAddr, natsAddr := agentdtest.FreeAddr(t), agentdtest.FreeAddr(t)
	startAgentd(t, bin, data, httpAddr, natsAddr, "--local-rate", "-1", "--user-token-budget", "600/24h")
	nc, err := nats.Connect("nats://" + natsAddr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	used := chatUntil(t, nc, []string{"u1", "u2"}, "alice", 600)
	code, body := budgetCmd(t, nc, "u1", "chat", `{"text":"one more"}`, nil)
	if code != "402" || !strings.Contains(body, "user alice's token budget of 600 tokens per 24h") {
		t.Fatalf("chat of u1 past alice's budget: %s %s", code, body)
	}
	if code, body := budgetCmd(t, nc, "v1", "chat", `{"text":"hello","meta":{"user":"bob"}}`, nil); code != "" {
		t.Fatalf("bob's agent refused: %s %s", code, body)
	}
	var st chat.BudgetStatus
	if code, body := budgetCmd(t, nc, "u2", "budget", "", &st); code != "" || len(st.Shared) != 1 || st.Shared[0].Spent.Tokens != used {
		t.Fatalf("budget of u2 = %s %s, want alice's with %d tokens spent", code, body, used)
	}
}

func connectCreds(t *testing.T, url, creds string) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(url, nats.UserCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// budgetCmd sends a command and returns its error code and body.
func budgetCmd(t *testing.T, nc *nats.Conn, agent, verb, payload string, out any) (string, string) {
	t.Helper()
	m, err := nc.Request("forever.cmd."+agent+"."+verb, []byte(payload), 30*time.Second)
	if err != nil {
		t.Fatalf("%s %s: %v", agent, verb, err)
	}
	if code := m.Header.Get("Nats-Service-Error-Code"); code != "" {
		return code, string(m.Data)
	}
	if out != nil {
		if err := json.Unmarshal(m.Data, out); err != nil {
			t.Fatalf("%s reply %s: %v", verb, m.Data, err)
		}
	}
	return "", string(m.Data)
}

// chatUntil chats with agents in turn (of user, when set) until their
// usage together passes limit tokens, and returns that usage.
func chatUntil(t *testing.T, nc *nats.Conn, agents []string, user string, limit int64) int64 {
	t.Helper()
	turns := map[string]int{}
	usage := map[string]int64{}
	total := func() (n int64) {
		for _, u := range usage {
			n += u
		}
		return n
	}
	for i := 0; total() < limit; i++ {
		if i == 60 {
			t.Fatalf("60 chats used only %d tokens", total())
		}
		agent := agents[i%len(agents)]
		payload := fmt.Sprintf(`{"text":"hello, this is message number %d"}`, i)
		if user != "" {
			payload = fmt.Sprintf(`{"text":"hello, this is message number %d","meta":{"user":%q}}`, i, user)
		}
		if code, body := budgetCmd(t, nc, agent, "chat", payload, nil); code != "" {
			t.Fatalf("chat %d with %d tokens used: %s %s", i, total(), code, body)
		}
		turns[agent]++
		var u chathost.UsageReply
		waitfor.Within(t, 20*time.Second, func() error {
			if budgetCmd(t, nc, agent, "usage", "", &u); u.Turns == turns[agent] {
				return nil
			}
			return fmt.Errorf("turn %d of %s not recorded in usage: %+v", i, agent, u)
		})
		usage[agent] = u.Input + u.Output
	}
	if len(usage) != len(agents) {
		t.Fatalf("usage of %v only", usage)
	}
	t.Logf("%d tokens in %v, over the limit of %d", total(), usage, limit)
	return total()
}
