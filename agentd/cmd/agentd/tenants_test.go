package main

import (
	"context"
	"encoding/json"
	"errors"
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
	"github.com/nats-io/nats.go/jetstream"

	"github.com/forever-agents/forever/agentd"
	"github.com/forever-agents/forever/agentd/agentdtest"
	"github.com/forever-agents/forever/agentd/chathost"
	"github.com/forever-agents/forever/agentd/tenancy"
	"github.com/forever-agents/forever/auth"
	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/internal/waitfor"
	"github.com/forever-agents/forever/replay"
)

// tenantCred is what agentd tenant create printed, and the creds file.
type tenantCred struct {
	Tenant  string `json:"tenant"`
	Token   string `json:"token"`
	Account string `json:"account"`
	Created bool   `json:"created"`
	Creds   string `json:"creds"`
}

// tenantCLI runs agentd tenant ... and returns stdout, stderr and the exit
// code.
func tenantCLI(t *testing.T, bin string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"tenant"}, args...)...)
	cmd.Env = os.Environ()
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return out.String(), errb.String(), 0
	case errors.As(err, &ee):
		return out.String(), errb.String(), ee.ExitCode()
	}
	t.Fatal(err)
	return "", "", -1
}

func createTenant(t *testing.T, bin, natsURL, admin, out, name string, extra ...string) tenantCred {
	t.Helper()
	stdout, stderr, code := tenantCLI(t, bin, append([]string{"create", name, "--nats-url", natsURL, "--creds", admin, "--out", out}, extra...)...)
	if code != 0 {
		t.Fatalf("tenant create %s: exit %d: %s", name, code, stderr)
	}
	var c tenantCred
	if err := json.Unmarshal([]byte(stdout), &c); err != nil || c.Tenant != name || !strings.HasPrefix(c.Token, "fvr_") {
		t.Fatalf("tenant create %s printed %q (%v)", name, stdout, err)
	}
	if c.Creds != filepath.Join(out, name+".creds") {
		t.Fatalf("creds at %q", c.Creds)
	}
	return c
}

// authedGet GETs url with a bearer token (none when empty).
func authedGet(t *testing.T, url, token string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// waitAnswered polls agent's messages over HTTP with token until an
// assistant message is there and the page holds every one of want.
func waitAnswered(t *testing.T, httpAddr, token, agent string, want ...string) string {
	t.Helper()
	return waitAnsweredWithin(t, 30*time.Second, httpAddr, token, agent, want...)
}

// waitAnsweredWithin is waitAnswered with its own bound.
func waitAnsweredWithin(t *testing.T, d time.Duration, httpAddr, token, agent string, want ...string) string {
	t.Helper()
	var body string
	waitfor.Within(t, d, func() error {
		var code int
		code, body = authedGet(t, "http://"+httpAddr+"/v1/chat/"+agent+"/messages", token)
		ok := code == 200 && strings.Contains(body, `"role":"assistant"`)
		for _, w := range want {
			ok = ok && strings.Contains(body, w)
		}
		if ok {
			return nil
		}
		return fmt.Errorf("%s was not answered: %d %.300s", agent, code, body)
	})
	return body
}

// testBinaryTenants: with --auth, two tenants use the same agent id without
// meeting; the server refuses a tenant's client everything but commands
// and chunk reads; revocation closes live connections and refuses tokens;
// tenants, credentials and revocations survive a restart.
func testBinaryTenants(t *testing.T, bin string) {
	dir := t.TempDir()
	data, out := filepath.Join(dir, "data"), filepath.Join(dir, "out")
	httpAddr, natsAddr := agentdtest.FreeAddr(t), agentdtest.FreeAddr(t)

	// A non-loopback listen without auth refuses to start.
	refused := exec.Command(bin, "--data", filepath.Join(dir, "open"), "--http", "0.0.0.0:0", "--nats-listen", natsAddr)
	if b, err := refused.CombinedOutput(); err == nil || !strings.Contains(string(b), "not a loopback address") || !strings.Contains(string(b), "--insecure") {
		t.Fatalf("--http 0.0.0.0:0 without auth: %v %s", err, b)
	}

	natsURL := "nats://" + natsAddr
	p := startAgentd(t, bin, data, httpAddr, natsAddr, "--auth", "--local-rate", "-1")
	admin := filepath.Join(data, agentd.AdminCredsFile)
	if fi, err := os.Stat(admin); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("admin.creds: %v %v", fi, err)
	}
	if nc, err := nats.Connect(natsURL); err == nil {
		nc.Close()
		t.Fatal("a connection without credentials was accepted")
	}

	// Bad input: a bad name, a tenant's creds in place of the admin's.
	if _, stderr, code := tenantCLI(t, bin, "create", "Bad_Name", "--nats-url", natsURL, "--creds", admin, "--out", out); code != 2 || !strings.Contains(stderr, "invalid tenant name") {
		t.Fatalf("bad name: exit %d %s", code, stderr)
	}
	acme := createTenant(t, bin, natsURL, admin, out, "acme")
	beta := createTenant(t, bin, natsURL, admin, out, "beta")
	// A quota the server cannot reserve: the server leaves the account
	// without JetStream; create says so at once, not after its timeout.
	start := time.Now()
	if _, stderr, code := tenantCLI(t, bin, "create", "huge", "--max-bytes", "64GiB", "--nats-url", natsURL, "--creds", admin, "--out", out); code != 1 ||
		!strings.Contains(stderr, "did not enable JetStream") || !strings.Contains(stderr, "max bytes 65536 MiB") || time.Since(start) > 30*time.Second {
		t.Fatalf("a quota over the server's store: exit %d after %s: %s", code, time.Since(start), stderr)
	}
	// A smaller quota heals it, without a restart.
	createTenant(t, bin, natsURL, admin, out, "huge", "--max-bytes", "64MiB")
	disableHuge := func() {
		t.Helper()
		if _, stderr, code := tenantCLI(t, bin, "disable", "huge", "--nats-url", natsURL, "--creds", admin); code != 0 {
			t.Fatalf("disable huge: exit %d %s", code, stderr)
		}
	}
	disableHuge()
	// A tenant's daemon that stops on its own (here its data dir is a
	// file) is started again, so the tenant heals once the cause is gone:
	// enable answers once it has.
	hugeDir := filepath.Join(data, agentd.TenantsSubdir, "huge")
	if err := os.Rename(hugeDir, hugeDir+".aside"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(hugeDir, []byte("not a directory"), 0o600); err != nil {
		t.Fatal(err)
	}
	enabled := make(chan string, 1)
	go func() {
		_, stderr, code := tenantCLI(t, bin, "enable", "huge", "--nats-url", natsURL, "--creds", admin)
		enabled <- fmt.Sprintf("exit %d %s", code, stderr)
	}()
	waitfor.NoError(t, func() error {
		if strings.Contains(p.out.String(), "data dir "+hugeDir+" is a file") {
			return nil
		}
		return fmt.Errorf("the tenant's daemon did not fail on its data dir:\n%s", p.out.String())
	})
	if err := errors.Join(os.Remove(hugeDir), os.Rename(hugeDir+".aside", hugeDir)); err != nil {
		t.Fatal(err)
	}
	if got := <-enabled; got != "exit 0 " {
		t.Fatalf("enable huge once its data dir is back: %s\n%s", got, p.out.String())
	}
	disableHuge()
	if _, stderr, code := tenantCLI(t, bin, "create", "evil", "--nats-url", natsURL, "--creds", acme.Creds, "--out", out); code != 1 || !strings.Contains(stderr, "no agentd with --auth answers") {
		t.Fatalf("tenant creds as admin: exit %d %s", code, stderr)
	}
	// A tenant moves into its node's shards; this node has none.
	if _, stderr, code := tenantCLI(t, bin, "move", "acme", "--nats-url", natsURL, "--creds", admin); code != 1 || !strings.Contains(stderr, "this node's log is unsharded") {
		t.Fatalf("tenant move on an unsharded node: exit %d %s", code, stderr)
	}

	connect := func(c tenantCred, opts ...nats.Option) *nats.Conn {
		nc, err := nats.Connect(natsURL, append([]nats.Option{nats.UserCredentials(c.Creds)}, opts...)...)
		if err != nil {
			t.Fatalf("connect as %s: %v", c.Tenant, err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
	chatOver := func(nc *nats.Conn, agent, text string) chathost.Reply {
		body, _ := json.Marshal(map[string]string{"text": text})
		msg, err := nc.Request("forever.cmd."+agent+".chat", body, 30*time.Second)
		if err != nil || msg.Header.Get("Nats-Service-Error-Code") != "" {
			t.Fatalf("chat %s: %v %v %s", agent, err, msg.Header, msg.Data)
		}
		var r chathost.Reply
		if err := json.Unmarshal(msg.Data, &r); err != nil {
			t.Fatal(err)
		}
		return r
	}
	messages := func(token, agent string) string {
		deadline := time.Now().Add(30 * time.Second)
		for {
			code, body := authedGet(t, "http://"+httpAddr+"/v1/chat/"+agent+"/messages", token)
			if code != 200 {
				t.Fatalf("messages: %d %s", code, body)
			}
			if strings.Count(body, `"role":"assistant"`) >= strings.Count(body, `"role":"user"`) || time.Now().After(deadline) {
				return body
			}
			time.Sleep(50 * time.Millisecond) // not a synchronisation: the interval of a poll on the assistant's answers
		}
	}

	// The same agent id in two tenants: two agents. acme's subscription
	// to every chunk sees none of beta's.
	acmeNC, betaNC := connect(acme), connect(beta)
	spy, err := acmeNC.SubscribeSync("forever.chunk.>")
	if err != nil {
		t.Fatal(err)
	}
	ar := chatOver(acmeNC, "bot", "acme secret plans")
	br := chatOver(betaNC, "bot", "beta hello")
	if m := messages(acme.Token, "bot"); !strings.Contains(m, "acme secret plans") || strings.Contains(m, "beta hello") {
		t.Fatalf("acme sees %s", m)
	}
	if m := messages(beta.Token, "bot"); strings.Contains(m, "acme") || !strings.Contains(m, "beta hello") {
		t.Fatalf("beta sees %s", m)
	}

	// A tenant's client replays its chunks from a cursor with an ordered
	// consumer on the chunks stream.
	lg, err := eventlog.Open(t.Context(), eventlog.Config{Conn: acmeNC, Bind: true, ChunksOnly: true, APIPrefix: auth.ClientAPIPrefix})
	if err != nil {
		t.Fatal(err)
	}
	var text strings.Builder
	for it, err := range replay.NewClient(lg).Follow(t.Context(), "bot", ar.StreamID, replay.CursorAt(0)) {
		if err != nil {
			t.Fatal(err)
		}
		text.WriteString(it.Chunk.Delta)
	}
	if !strings.Contains(text.String(), "acme secret plans") {
		t.Fatalf("replayed %q", text.String())
	}
	for it, err := range replay.NewClient(lg).Follow(t.Context(), "bot", br.StreamID, replay.CursorAt(0)) {
		if err == nil {
			t.Fatalf("acme replayed beta's stream: %+v", it)
		}
		break
	}
	for {
		m, err := spy.NextMsg(200 * time.Millisecond)
		if err != nil {
			break
		}
		if strings.Contains(m.Subject, br.StreamID) || strings.Contains(string(m.Data), "beta hello") {
			t.Fatalf("acme received beta's chunk on %s", m.Subject)
		}
	}

	// Everything else is refused by the server.
	violations := make(chan error, 16)
	probe := connect(acme, nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { violations <- err }))
	mustViolate := func(what string, do func() error) {
		t.Helper()
		err := do()
		if err == nil || !strings.Contains(strings.ToLower(err.Error()), "permissions violation") {
			select {
			case err = <-violations:
			case <-time.After(5 * time.Second):
			}
		}
		if err == nil || !strings.Contains(strings.ToLower(err.Error()), "permissions violation") {
			t.Fatalf("%s: not refused (%v)", what, err)
		}
	}
	mustViolate("publish an event", func() error { return probe.Publish("forever.evt.bot", []byte("{}")) })
	mustViolate("publish a chunk", func() error { return probe.Publish("forever.chunk.bot.s1", []byte("{}")) })
	mustViolate("subscribe to events", func() error { _, err := probe.SubscribeSync("forever.evt.>"); return err })
	mustViolate("delete the events stream", func() error {
		_, err := probe.Request("$JS.API.STREAM.DELETE."+eventlog.DefaultEventsStream, nil, 2*time.Second)
		return err
	})
	mustViolate("read the events stream", func() error {
		js, _ := jetstream.New(probe)
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		defer cancel()
		_, err := js.OrderedConsumer(ctx, eventlog.DefaultEventsStream, jetstream.OrderedConsumerConfig{})
		return err
	})
	mustViolate("purge the chunks stream", func() error {
		_, err := probe.Request("$JS.API.STREAM.PURGE."+eventlog.DefaultChunksStream, nil, 2*time.Second)
		return err
	})
	mustViolate("read the leases bucket", func() error {
		_, err := probe.Request("$JS.API.DIRECT.GET.KV_FOREVER_LEASES.$KV.FOREVER_LEASES.p0", nil, 2*time.Second)
		return err
	})
	mustViolate("read the tenant registry", func() error {
		_, err := probe.Request("$JS.API.STREAM.INFO.KV_"+tenancy.TenantsBucket, nil, 2*time.Second)
		return err
	})
	testTenantAgents(t, bin, natsURL, httpAddr, admin, acme, beta)
	if code, _ := authedGet(t, "http://"+httpAddr+"/v1/chat/bot/messages", ""); code != 401 {
		t.Fatalf("no token: %d", code)
	}
	if code, _ := authedGet(t, "http://"+httpAddr+"/v1/chat/bot/messages", "fvr_not-a-token"); code != 401 {
		t.Fatalf("bad token: %d", code)
	}

	// Revoking acme closes its live connection and refuses its token;
	// beta goes on.
	closed := make(chan struct{})
	connect(acme, nats.NoReconnect(), nats.ClosedHandler(func(*nats.Conn) { close(closed) }))
	stdout, stderr, code := tenantCLI(t, bin, "revoke", "acme", "--nats-url", natsURL, "--creds", admin)
	if code != 0 || !strings.Contains(stdout, `"revoked":`) {
		t.Fatalf("revoke: exit %d %s %s", code, stdout, stderr)
	}
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("the revoked tenant's live connection is still open")
	}
	if nc, err := nats.Connect(natsURL, nats.UserCredentials(acme.Creds)); err == nil {
		nc.Close()
		t.Fatal("revoked creds accepted")
	}
	if code, _ := authedGet(t, "http://"+httpAddr+"/v1/chat/bot/messages", acme.Token); code != 401 {
		t.Fatalf("revoked token: %d", code)
	}
	chatOver(betaNC, "bot2", "beta goes on")
	if _, stderr, code := tenantCLI(t, bin, "revoke", "nobody", "--nats-url", natsURL, "--creds", admin); code != 1 || !strings.Contains(stderr, "404") {
		t.Fatalf("revoke unknown: exit %d %s", code, stderr)
	}

	// After a restart: beta's credentials work, acme's stay revoked, and a
	// new acme credential finds acme's history.
	p.cmd.Process.Signal(os.Interrupt)
	if err := <-p.exited; err != nil {
		t.Fatalf("agentd exit: %v\n%s", err, p.out.String())
	}
	startAgentd(t, bin, data, httpAddr, natsAddr, "--auth", "--local-rate", "-1")
	if m := messages(beta.Token, "bot2"); !strings.Contains(m, "beta goes on") {
		t.Fatalf("beta after restart: %s", m)
	}
	chatOver(connect(beta), "bot2", "beta after restart")
	if code, _ := authedGet(t, "http://"+httpAddr+"/v1/chat/bot/messages", acme.Token); code != 401 {
		t.Fatalf("revoked token after restart: %d", code)
	}
	again := createTenant(t, bin, natsURL, admin, out, "acme")
	if again.Created || again.Account != acme.Account {
		t.Fatalf("second create: %+v", again)
	}
	if m := messages(again.Token, "bot"); !strings.Contains(m, "acme secret plans") {
		t.Fatalf("acme's history after a new credential: %s", m)
	}
	chatOver(connect(again), "bot", "acme is back")

	testTenantQuotas(t, bin, natsURL, httpAddr, admin, out)
}

// testTenantQuotas: over a quota a request gets 429 with Retry-After (a
// micro error over NATS), and nothing stored is touched.
func testTenantQuotas(t *testing.T, bin, natsURL, httpAddr, admin, out string) {
	chat := func(c tenantCred, agent, text string) *nats.Msg {
		nc, err := nats.Connect(natsURL, nats.UserCredentials(c.Creds))
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		body, _ := json.Marshal(map[string]string{"text": text})
		msg, err := nc.Request("forever.cmd."+agent+".chat", body, 30*time.Second)
		if err != nil {
			t.Fatalf("chat %s: %v", agent, err)
		}
		return msg
	}
	refused := func(m *nats.Msg, quota string) {
		t.Helper()
		if m.Header.Get("Nats-Service-Error-Code") != "429" || m.Header.Get("Retry-After") == "" ||
			!strings.Contains(m.Header.Get("Nats-Service-Error"), "over quota") {
			t.Fatalf("%s: want 429 over quota, got %v %s", quota, m.Header, m.Data)
		}
	}
	ok := func(m *nats.Msg) {
		t.Helper()
		if code := m.Header.Get("Nats-Service-Error-Code"); code != "" {
			t.Fatalf("refused: %v", m.Header)
		}
	}

	// Agents: the second agent is refused, the first goes on.
	few := createTenant(t, bin, natsURL, admin, out, "few", "--max-agents", "1")
	ok(chat(few, "a1", "first"))
	refused(chat(few, "a2", "second"), "agents")
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) { // not a synchronisation: the interval of a poll on the first turn's end (409 while it runs)
		m := chat(few, "a1", "again") // 409 while the first turn runs
		if m.Header.Get("Nats-Service-Error-Code") != "409" || time.Now().After(deadline) {
			ok(m)
			break
		}
	}

	// Rate: a burst of 2 at a rate that refills in an hour.
	slow := createTenant(t, bin, natsURL, admin, out, "slow", "--rate", "0.0003", "--burst", "2")
	codes := []int{}
	for range 3 {
		code, _ := authedGet(t, "http://"+httpAddr+"/v1/chat/x/messages", slow.Token)
		codes = append(codes, code)
	}
	if codes[0] != 200 || codes[1] != 200 || codes[2] != 429 {
		t.Fatalf("rate: codes %v", codes)
	}
	refused(chat(slow, "x", "over the rate"), "rate")

	// Turns: one at a time; a turn blocked in a slow tool holds it.
	one := createTenant(t, bin, natsURL, admin, out, "one", "--max-turns", "1")
	ok(chat(one, "t1", `/tool clock {"delayMs":4000}`))
	refused(chat(one, "t2", "meanwhile"), "turns")
	waitAnswered(t, httpAddr, one.Token, "t1", "clock") // the admitted turn completes

	// Bytes: writes are refused once the account stores its quota; what it
	// stored stays readable.
	tiny := createTenant(t, bin, natsURL, admin, out, "tiny", "--max-bytes", "48KiB")
	var last *nats.Msg
	for i := range 200 {
		last = chat(tiny, fmt.Sprintf("b%d", i), fmt.Sprintf("message number %d, padded %s", i, strings.Repeat("x", 400)))
		if last.Header.Get("Nats-Service-Error-Code") != "" {
			break
		}
	}
	refused(last, "bytes")
	if !strings.Contains(last.Header.Get("Nats-Service-Error"), "bytes") {
		t.Fatalf("bytes: %v", last.Header)
	}
	if code, body := authedGet(t, "http://"+httpAddr+"/v1/chat/b0/messages", tiny.Token); code != 200 || !strings.Contains(body, "message number 0,") {
		t.Fatalf("tiny's messages after the quota: %d %.200s", code, body)
	}
}
