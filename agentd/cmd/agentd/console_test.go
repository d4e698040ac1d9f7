package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/forever-agents/forever/agentd/agentdtest"
	"github.com/forever-agents/forever/agentd/demo"
	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/fiber"
	"github.com/forever-agents/forever/internal/waitfor"
)

// screenshot saves a PNG of the page as name under $FOREVER_SCREENSHOTS
// (the test's temp dir when unset) and logs where.
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	dir := os.Getenv("FOREVER_SCREENSHOTS")
	if dir == "" {
		dir = t.TempDir()
	}
	var png []byte
	if err := chromedp.Run(ctx, chromedp.EmulateViewport(1280, 900), chromedp.Sleep(300*time.Millisecond),
		chromedp.FullScreenshot(&png, 100)); err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	path := filepath.Join(dir, name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", path)
}

// postChat starts a chat turn over HTTP with token (none when empty) and
// reads its stream to the end.
func postChat(t *testing.T, httpAddr, token, agent, text string) {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"id": agent, "messages": []any{map[string]any{"id": "u-" + agent + "-" + time.Now().Format("150405.000"),
		"role": "user", "parts": []any{map[string]string{"type": "text", "text": text}}}}})
	req, _ := http.NewRequest("POST", "http://"+httpAddr+"/v1/chat", strings.NewReader(string(body)))
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("POST /v1/chat %s: %d %s", agent, resp.StatusCode, b)
	}
}

// testBinaryConsole: the console (GET /console, headless Chromium) lists
// the agents; shows a steps fiber's steps on its timeline during and after
// a SIGKILL, with the recovery marked; and approves a tool call waiting
// for approval, which the agent then runs.
func testBinaryConsole(t *testing.T, bin string) {
	chromium := chromiumPath(t)
	data := filepath.Join(t.TempDir(), "data")
	httpAddr, natsAddr := agentdtest.FreeAddr(t), agentdtest.FreeAddr(t)
	p := startAgentd(t, bin, data, httpAddr, natsAddr, "--local-rate", "-1")
	c := dialAgentd(t, natsAddr)

	// A steps fiber, killed mid-run, recovered after a restart.
	var r struct{ Fiber string }
	json.Unmarshal(c.command("steps:console", "start", demo.StepsStart{Steps: 10, DelayMS: 150, RecoveryDelayMS: 1500}), &r)
	agents := []string{"steps:console"}
	c.waitFor("4 steps", agents, func(evs []eventlog.Event) bool { return count(evs, demo.EventStepExecuted, r.Fiber) >= 4 })
	p.kill()
	p = startAgentd(t, bin, data, httpAddr, natsAddr, "--local-rate", "-1")
	c = dialAgentd(t, natsAddr)
	c.waitFor("the recovery", agents, func(evs []eventlog.Event) bool { return count(evs, fiber.EventRecovered, r.Fiber) >= 1 })

	postChat(t, httpAddr, "", "chat-hello", "Hello, console.")
	// 50 KB without a space: a long message must not widen the page.
	postChat(t, httpAddr, "", "chat-long", strings.Repeat("x", 50<<10))
	postChat(t, httpAddr, "", "chat-approve", `/tool note {"text":"please approve me"}`)

	ctx := browser(t, chromium)
	base := "http://" + httpAddr + "/console"
	err := chromedp.Run(ctx,
		chromedp.Navigate(base),
		chromedp.WaitVisible(`tr[data-agent="steps:console"]`, chromedp.ByQuery),
		chromedp.WaitVisible(`tr[data-agent="chat-approve"]`, chromedp.ByQuery),
		chromedp.WaitVisible(`tr[data-agent="chat-hello"]`, chromedp.ByQuery),
	)
	if err != nil {
		t.Fatalf("agents list: %v\n%s", err, p.out.String())
	}
	screenshot(t, ctx, "console-agents")

	// The timeline during the recovery, then after the fiber completed.
	var recs string
	err = chromedp.Run(ctx,
		chromedp.Click(`tr[data-agent="steps:console"]`, chromedp.ByQuery),
		chromedp.WaitVisible(`#timeline .row.fiber[data-recoveries="1"]`, chromedp.ByQuery),
	)
	if err != nil {
		t.Fatalf("timeline: %v\n%s", err, p.out.String())
	}
	screenshot(t, ctx, "console-fiber-recovering")
	c.waitFor("the fiber to complete", agents, func(evs []eventlog.Event) bool { return count(evs, fiber.EventCompleted, r.Fiber) == 1 })
	err = chromedp.Run(ctx,
		chromedp.Poll(`document.querySelector('#timeline .row.fiber .lbl')?.textContent.includes('completed')`, nil, chromedp.WithPollingTimeout(10*time.Second)),
		chromedp.AttributeValue(`#timeline .row.fiber`, "data-recoveries", &recs, nil, chromedp.ByQuery),
	)
	if err != nil {
		t.Fatalf("timeline after: %v\n%s", err, p.out.String())
	}
	var steps, marks, open int
	chromedp.Run(ctx, chromedp.Evaluate(`document.querySelectorAll('#timeline .step').length`, &steps),
		chromedp.Evaluate(`document.querySelectorAll('#timeline .rec').length`, &marks),
		chromedp.Evaluate(`document.querySelectorAll('#timeline .step.open').length`, &open))
	if recs != "1" || marks != 1 || steps < 10 || open != 0 {
		t.Errorf("timeline after the fiber completed: %s recoveries, %d marks, %d steps (%d open); want 1, 1, >=10, 0", recs, marks, steps, open)
	}
	screenshot(t, ctx, "console-fiber")

	// Approve the waiting note from its card.
	err = chromedp.Run(ctx,
		chromedp.Navigate(base+"#/agent/chat-approve"),
		chromedp.WaitVisible(`.approval [data-approve="true"]`, chromedp.ByQuery),
	)
	if err != nil {
		t.Fatalf("approval card: %v\n%s", err, p.out.String())
	}
	screenshot(t, ctx, "console-approval")
	err = chromedp.Run(ctx,
		chromedp.Click(`.approval [data-approve="true"]`, chromedp.ByQuery),
		chromedp.Poll(`!document.querySelector('.approval [data-approve]') && document.getElementById('conv').textContent.includes('The note tool returned')`, nil, chromedp.WithPollingTimeout(20*time.Second)),
	)
	if err != nil {
		var conv string
		chromedp.Run(ctx, chromedp.Text(`#conv`, &conv, chromedp.ByQuery))
		t.Fatalf("approve: %v\nconversation: %s\n%s", err, conv, p.out.String())
	}
	notes, _ := os.ReadFile(filepath.Join(data, demo.NotesFile))
	if strings.Count(string(notes), "please approve me") != 1 {
		t.Errorf("notes file after the approval: %q, want the note once", notes)
	}
	screenshot(t, ctx, "console-approved")

	// The stream view replays the hello turn.
	err = chromedp.Run(ctx,
		chromedp.Navigate(base+"#/agent/chat-hello"),
		chromedp.Click(`tr[data-stream]`, chromedp.ByQuery),
		chromedp.Poll(`document.getElementById('sstat')?.textContent.includes('ended') && document.getElementById('text').textContent.includes('Hello, console.')`, nil, chromedp.WithPollingTimeout(10*time.Second)),
	)
	if err != nil {
		t.Fatalf("stream view: %v", err)
	}
	screenshot(t, ctx, "console-stream")

	// At 1400 px, a 50 KB message wraps in the conversation column and the
	// status panel stays on screen, beside it.
	const onScreen = `(() => { const r = document.getElementById('info')?.getBoundingClientRect();
		return !!r && r.width > 0 && r.left >= 0 && r.right <= window.innerWidth &&
			document.documentElement.scrollWidth <= window.innerWidth &&
			document.getElementById('conv').textContent.includes('xxxxxxxxxx'); })()`
	err = chromedp.Run(ctx,
		chromedp.EmulateViewport(1400, 900),
		chromedp.Navigate(base+"#/agent/chat-long"),
		chromedp.Poll(onScreen, nil, chromedp.WithPollingTimeout(10*time.Second)),
	)
	if err != nil {
		var geo string
		chromedp.Run(ctx, chromedp.Evaluate(`JSON.stringify({info: document.getElementById('info')?.getBoundingClientRect(),
			inner: window.innerWidth, scroll: document.documentElement.scrollWidth})`, &geo))
		t.Fatalf("status panel with a 50 KB message at 1400 px: %v\n%s", err, geo)
	}
	screenshot(t, ctx, "console-long-message")
}

// testBinaryConsoleTenant: under --auth the console loads without a token,
// asks for one on the first 401, and with a tenant's token lists only
// that tenant's agents; with the admin's HTTP token (agentd auth
// admin-token) it lists every tenant's, and opens one. GET /v1/tenants is
// the admin token's only.
func testBinaryConsoleTenant(t *testing.T, bin string) {
	chromium := chromiumPath(t)
	data := filepath.Join(t.TempDir(), "data")
	httpAddr, natsAddr := agentdtest.FreeAddr(t), agentdtest.FreeAddr(t)
	p := startAgentd(t, bin, data, httpAddr, natsAddr, "--auth", "--local-rate", "-1")
	admin := filepath.Join(data, "admin.creds")
	acme := createTenant(t, bin, "nats://"+natsAddr, admin, t.TempDir(), "acme", "--max-agents", "10", "--max-bytes", "64MiB")
	globex := createTenant(t, bin, "nats://"+natsAddr, admin, t.TempDir(), "globex")
	waitfor.NoError(t, func() error {
		a, _ := authedGet(t, "http://"+httpAddr+"/v1/agents", acme.Token)
		g, _ := authedGet(t, "http://"+httpAddr+"/v1/agents", globex.Token)
		if a == 200 && g == 200 {
			return nil
		}
		return fmt.Errorf("tenants not served: %d %d\n%s", a, g, p.out.String())
	})
	postChat(t, httpAddr, acme.Token, "acme-one", "hello from acme")
	postChat(t, httpAddr, globex.Token, "globex-one", "hello from globex")

	ctx := browser(t, chromium)
	var rows []string
	err := chromedp.Run(ctx,
		chromedp.Navigate("http://"+httpAddr+"/console"),
		chromedp.WaitVisible(`#token`, chromedp.ByQuery),
		chromedp.SendKeys(`#token`, acme.Token, chromedp.ByQuery),
		chromedp.Click(`#token-use`, chromedp.ByQuery),
		chromedp.WaitVisible(`tr[data-agent="acme-one"]`, chromedp.ByQuery),
		chromedp.Evaluate(`[...document.querySelectorAll('tr[data-agent]')].map(r => r.dataset.agent)`, &rows),
	)
	if err != nil {
		t.Fatalf("console with a token: %v\n%s", err, p.out.String())
	}
	if len(rows) != 1 || rows[0] != "acme-one" {
		t.Errorf("acme's console lists %v, want only acme-one", rows)
	}
	screenshot(t, ctx, "console-tenant")

	// The admin's HTTP token sees every tenant's agents, and opens one.
	out, stderr, code := tenantCLIAuth(t, bin, "admin-token", "--data", data, "--ttl", "1h")
	adminTok := strings.TrimSpace(out)
	if code != 0 || !strings.HasPrefix(adminTok, "fvra_") {
		t.Fatalf("auth admin-token: exit %d: %q %s", code, out, stderr)
	}
	if code, body := authedGet(t, "http://"+httpAddr+"/v1/tenants", acme.Token); code != http.StatusForbidden {
		t.Errorf("GET /v1/tenants with a tenant's token: %d %s, want 403", code, body)
	}
	if code, body := authedGet(t, "http://"+httpAddr+"/v1/tenants", "fvra_forged"); code != http.StatusUnauthorized {
		t.Errorf("GET /v1/tenants with a forged admin token: %d %s, want 401", code, body)
	}
	req, _ := http.NewRequest("GET", "http://"+httpAddr+"/v1/agents", nil)
	req.Header.Set("Authorization", "Bearer fvra_forged")
	req.Header.Set("X-Forever-Tenant", "acme")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("GET /v1/agents with a forged admin token: %d, want 401", resp.StatusCode)
	}
	if code, body := authedGet(t, "http://"+httpAddr+"/v1/agents", adminTok); code != http.StatusBadRequest {
		t.Errorf("GET /v1/agents with the admin token and no tenant: %d %s, want 400", code, body)
	}
	var tenants []string
	err = chromedp.Run(ctx,
		chromedp.Evaluate(`sessionStorage.setItem("forever.token", `+strconvQuote(adminTok)+`)`, nil),
		chromedp.Navigate("http://"+httpAddr+"/console#/"),
		chromedp.Reload(),
		chromedp.WaitVisible(`tr[data-agent="globex-one"]`, chromedp.ByQuery),
		chromedp.WaitVisible(`tr[data-agent="acme-one"]`, chromedp.ByQuery),
		chromedp.Evaluate(`[...document.querySelectorAll('tr[data-agent]')].map(r => r.dataset.tenant + "/" + r.dataset.agent).sort()`, &tenants),
	)
	if err != nil {
		t.Fatalf("console with the admin token: %v\n%s", err, p.out.String())
	}
	if strings.Join(tenants, ",") != "acme/acme-one,globex/globex-one" {
		t.Errorf("the admin's console lists %v, want acme/acme-one and globex/globex-one", tenants)
	}
	screenshot(t, ctx, "console-admin")
	err = chromedp.Run(ctx,
		chromedp.Click(`tr[data-agent="globex-one"]`, chromedp.ByQuery),
		chromedp.Poll(`document.getElementById('conv')?.textContent.includes('hello from globex')`, nil, chromedp.WithPollingTimeout(10*time.Second)),
	)
	if err != nil {
		t.Fatalf("the admin opens globex-one: %v", err)
	}

	// The admin's Tenants view: each tenant's quotas and what it uses of
	// them, from GET /v1/tenants.
	code, body := authedGet(t, "http://"+httpAddr+"/v1/tenants", adminTok)
	var list struct {
		Tenants []struct {
			Name  string
			Quota struct{ Agents, Bytes int64 }
			Usage *struct{ Agents, Bytes, Streams int64 }
		}
	}
	if err := json.Unmarshal([]byte(body), &list); code != 200 || err != nil || len(list.Tenants) != 2 {
		t.Fatalf("GET /v1/tenants: %d %s (%v)", code, body, err)
	}
	for _, tn := range list.Tenants {
		if tn.Usage == nil || tn.Usage.Agents != 1 || tn.Usage.Bytes <= 0 || tn.Usage.Streams == 0 {
			t.Errorf("tenant %s's usage: %s; want its one agent and the bytes it stores", tn.Name, body)
		}
		if tn.Name == "acme" && (tn.Quota.Agents != 10 || tn.Quota.Bytes != 64<<20) {
			t.Errorf("acme's quota: %s; want 10 agents and 64 MiB", body)
		}
	}
	var acmeAgents string
	err = chromedp.Run(ctx,
		chromedp.Click(`a[data-nav="tenants"]`, chromedp.ByQuery),
		chromedp.WaitVisible(`tr[data-tenant="acme"] .progress`, chromedp.ByQuery),
		chromedp.WaitVisible(`tr[data-tenant="globex"]`, chromedp.ByQuery),
		chromedp.Text(`tr[data-tenant="acme"] td:nth-child(3)`, &acmeAgents, chromedp.ByQuery),
	)
	if err != nil {
		t.Fatalf("the admin's tenants view: %v", err)
	}
	if !strings.Contains(acmeAgents, "1 of 10") {
		t.Errorf("acme's agents in the tenants view: %q, want 1 of 10", acmeAgents)
	}
	screenshot(t, ctx, "console-tenants")
}

// tenantCLIAuth runs agentd auth with args.
func tenantCLIAuth(t *testing.T, bin string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"auth"}, args...)...)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), errb.String(), code
}

func strconvQuote(s string) string { return strconv.Quote(s) }

// testClusterConsole: the console's cluster view on a 3-node loopback
// cluster (StoreFull's, once its store has room again) shows the three
// nodes live and every partition owned; once a node is SIGKILLed, it
// shows that node dead and its partitions moved to the two others.
func testClusterConsole(t *testing.T, nodes []*clusterNode) {
	chromium := chromiumPath(t)
	ctx := browser(t, chromium)
	const live = `document.querySelectorAll('#nodes tr[data-live=true]').length`
	err := chromedp.Run(ctx,
		chromedp.Navigate("http://"+nodes[0].http+"/console#/cluster"),
		chromedp.Poll(live+` === 3`, nil, chromedp.WithPollingTimeout(20*time.Second)),
	)
	if err != nil {
		t.Fatalf("cluster view: %v", err)
	}
	var tiles int
	chromedp.Run(ctx, chromedp.Evaluate(`document.querySelectorAll('#leases [data-owner^=forever-]').length`, &tiles))
	if tiles != 64 {
		t.Errorf("%d partitions shown owned, want 64", tiles)
	}
	checkStoreFigures(t, ctx, "http://"+nodes[0].http+"/v1/cluster")
	screenshot(t, ctx, "console-cluster")
	dead := nodes[2].name
	nodes[2].proc.kill()
	owned := `[...document.querySelectorAll('#leases [data-owner]')].map(e => e.dataset.owner)`
	err = chromedp.Run(ctx,
		chromedp.Poll(`document.querySelector('#nodes tr[data-node="`+dead+`"]')?.dataset.live === 'false' && `+
			live+` === 2 && !`+owned+`.includes('`+dead+`')`, nil, chromedp.WithPollingTimeout(60*time.Second)),
	)
	if err != nil {
		var shown string
		chromedp.Run(ctx, chromedp.Text(`#cl`, &shown, chromedp.ByQuery))
		t.Fatalf("cluster view after killing %s: %v\n%.2000s", dead, err, shown)
	}
	var moves int
	chromedp.Run(ctx, chromedp.Evaluate(`document.querySelectorAll('#moves tr[data-move]').length`, &moves))
	if moves == 0 {
		t.Errorf("no lease move shown after %s died", dead)
	}
	screenshot(t, ctx, "console-cluster-node-killed")
}

// checkStoreFigures checks that the cluster view's Store line shows what
// GET /v1/cluster's store says (read again until the page, which polls,
// catches up): the same streams, and consumers, store and views sizes
// within a factor of two (they move meanwhile), free disk when the API
// has it.
func checkStoreFigures(t *testing.T, ctx context.Context, url string) {
	t.Helper()
	type figures struct {
		Streams, Consumers       int
		Storage, Views, DiskFree uint64
	}
	var api, page figures
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		var c struct {
			Store struct {
				JetStream struct {
					Storage            uint64
					Streams, Consumers int
				} `json:"jetstream"`
				ViewsBytes    uint64 `json:"viewsBytes"`
				DiskFreeBytes uint64 `json:"diskFreeBytes"`
			} `json:"store"`
		}
		err = json.NewDecoder(resp.Body).Decode(&c)
		resp.Body.Close()
		if err != nil {
			t.Fatalf("GET %s: %v", url, err)
		}
		api = figures{c.Store.JetStream.Streams, c.Store.JetStream.Consumers, c.Store.JetStream.Storage, c.Store.ViewsBytes, c.Store.DiskFreeBytes}
		var ds map[string]string
		if err := chromedp.Run(ctx, chromedp.Evaluate(`Object.assign({}, document.querySelector('#store')?.dataset)`, &ds)); err != nil {
			t.Fatal(err)
		}
		num := func(k string) uint64 { n, _ := strconv.ParseUint(ds[k], 10, 64); return n }
		page = figures{int(num("streams")), int(num("consumers")), num("storage"), num("views"), num("diskFree")}
		// Streams are fixed; the sizes and consumers move between the
		// page's poll and this read, so they agree within a factor of two.
		near := func(a, b uint64) bool { return a > 0 && b > 0 && a <= 2*b && b <= 2*a }
		if page.Streams == api.Streams && near(uint64(page.Consumers), uint64(api.Consumers)) && near(page.Storage, api.Storage) &&
			near(page.Views, api.Views) && (page.DiskFree > 0) == (api.DiskFree > 0) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the cluster view's store shows %+v, GET /v1/cluster says %+v", page, api)
		}
		chromedp.Run(ctx, chromedp.Sleep(500*time.Millisecond))
	}
	if api.Streams == 0 || api.Storage == 0 {
		t.Errorf("GET /v1/cluster's store is empty: %+v", api)
	}
}
