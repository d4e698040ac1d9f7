package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/forever-agents/forever/agentd"
	"github.com/forever-agents/forever/agentd/agentdtest"
	"github.com/forever-agents/forever/agentd/audit"
	"github.com/forever-agents/forever/agentd/tenancy"
	"github.com/forever-agents/forever/auth"
	"github.com/forever-agents/forever/eventlog"
)

// TestSecurity builds agentd and attacks it as issue 22's red team did:
// slow and idle HTTP connections, a tenant filling the store or making
// consumers, scoped, expired, revoked and disabled credentials, denied
// publishes, and checks the audit log saw it all.
func TestSecurity(t *testing.T) {
	t.Parallel()
	runBlackBoxes(t, buildBinary(t), []blackBox{
		{"Tenants", light, 290, testSecurityTenants},
		{"HTTPLimits", light, 6, testSecurityHTTPLimits},
	})
}

// closedWithin waits for the server to close c; it fails the test when c
// is still open after limit.
func closedWithin(t *testing.T, c net.Conn, limit time.Duration, what string) time.Duration {
	t.Helper()
	start := time.Now()
	c.SetReadDeadline(start.Add(limit))
	_, err := io.Copy(io.Discard, c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("%s: still open after %s", what, limit)
	}
	return time.Since(start)
}

// testSecurityHTTPLimits: with the HTTP timeouts set short, a connection
// that sends no headers, one whose body trickles, and an idle kept-alive
// one are closed within their bounds (plus a margin); the defaults are
// bounded (body 30s, idle 2m).
func testSecurityHTTPLimits(t *testing.T, bin string) {
	out, _ := exec.Command(bin, "-h").CombinedOutput()
	for _, want := range []string{"-http-body-timeout duration", "(default 30s)", "-http-idle-timeout duration", "(default 2m0s)", "-http-max-conns", "(default 4096)"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("agentd -h lacks %q", want)
		}
	}
	data := filepath.Join(t.TempDir(), "data")
	httpAddr, natsAddr := agentdtest.FreeAddr(t), agentdtest.FreeAddr(t)
	startAgentd(t, bin, data, httpAddr, natsAddr, "--http-read-header-timeout", "1s", "--http-body-timeout", "2s", "--http-idle-timeout", "3s")
	dial := func() net.Conn {
		c, err := net.Dial("tcp", httpAddr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	const margin = 5 * time.Second
	var wg sync.WaitGroup
	check := func(what string, bound time.Duration, c net.Conn) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			took := closedWithin(t, c, bound+margin, what)
			t.Logf("%s closed after %s (bound %s)", what, took.Round(10*time.Millisecond), bound)
		}()
	}
	noHeaders := dial()
	noHeaders.Write([]byte("GET /healthz HTTP/1.1\r\n"))
	check("headers never ended", time.Second, noHeaders)

	slow := dial()
	slow.Write([]byte("POST /v1/chat HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{"))
	stop := make(chan struct{})
	defer close(stop)
	go func() { // a byte every 200ms: never idle, never done
		for {
			select {
			case <-stop:
				return
			case <-time.After(200 * time.Millisecond):
				if _, err := slow.Write([]byte(" ")); err != nil {
					return
				}
			}
		}
	}()
	check("slow body", 2*time.Second, slow)

	idle := dial()
	idle.Write([]byte("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"))
	resp, err := http.ReadResponse(bufio.NewReader(idle), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	check("idle kept-alive connection", 3*time.Second, idle)
	wg.Wait()
	t.Run("Frames", func(t *testing.T) { testFramesForbidden(t, httpAddr) })
}

// cred is what agentd tenant create printed.
type cred struct {
	Tenant  string `json:"tenant"`
	Token   string `json:"token"`
	Cred    string `json:"cred"`
	Role    string `json:"role"`
	Expires string `json:"expires"`
	Creds   string `json:"creds"`
	Limits  struct {
		Bytes     int64 `json:"bytes"`
		Consumers int64 `json:"consumers"`
	} `json:"limits"`
}

// secEnv is one agentd with --auth that the tenant subtests share.
type secEnv struct {
	t                        *testing.T
	bin, data, out           string
	httpAddr, natsURL, admin string
	metricsAddr              string
	proc                     *agentdProc
	issuer                   *testIssuer
}

func (e *secEnv) mint(t *testing.T, tenant string, args ...string) cred {
	t.Helper()
	stdout, stderr, code := tenantCLI(t, e.bin, append([]string{"create", tenant, "--nats-url", e.natsURL, "--creds", e.admin, "--out", e.out}, args...)...)
	if code != 0 {
		t.Fatalf("tenant create %s %v: exit %d: %s", tenant, args, code, stderr)
	}
	var c cred
	if err := json.Unmarshal([]byte(stdout), &c); err != nil || !strings.HasPrefix(c.Token, "fvr_") || c.Cred == "" {
		t.Fatalf("tenant create printed %q (%v)", stdout, err)
	}
	return c
}

func (e *secEnv) admin1(t *testing.T, args ...string) string {
	t.Helper()
	stdout, stderr, code := tenantCLI(t, e.bin, append(args, "--nats-url", e.natsURL, "--creds", e.admin)...)
	if code != 0 {
		t.Fatalf("tenant %v: exit %d: %s", args, code, stderr)
	}
	return stdout
}

func (e *secEnv) get(t *testing.T, path, token string) (int, string) {
	t.Helper()
	return authedGet(t, "http://"+e.httpAddr+path, token)
}

// post sends an AI SDK chat body for agent with text, returns the status
// and the first bytes of the body (the stream is read to its end).
func (e *secEnv) post(t *testing.T, token, agent, text string) (int, string) {
	t.Helper()
	body := `{"id":"` + agent + `","messages":[{"id":"u-` + strconv.FormatInt(time.Now().UnixNano(), 36) + `","role":"user","parts":[{"type":"text","text":"` + text + `"}]}]}`
	req, _ := http.NewRequest(http.MethodPost, "http://"+e.httpAddr+"/v1/chat", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// natsChat sends a chat command with c's creds and returns the reply.
func (e *secEnv) natsChat(t *testing.T, c cred, agent, text string) *nats.Msg {
	t.Helper()
	nc, err := nats.Connect(e.natsURL, nats.UserCredentials(c.Creds))
	if err != nil {
		t.Fatalf("connect as %s/%s: %v", c.Tenant, c.Cred, err)
	}
	defer nc.Close()
	body, _ := json.Marshal(map[string]string{"text": text})
	msg, err := nc.Request("forever.cmd."+agent+".chat", body, 30*time.Second)
	if err != nil {
		t.Fatalf("chat %s as %s/%s: %v", agent, c.Tenant, c.Cred, err)
	}
	return msg
}

func errCode(m *nats.Msg) string { return m.Header.Get("Nats-Service-Error-Code") }

// readyPartitions returns /readyz's status and partitions.
func (e *secEnv) readyPartitions(t *testing.T) (int, int) {
	t.Helper()
	code, body := e.get(t, "/readyz", "")
	var h agentd.Health
	json.Unmarshal([]byte(body), &h)
	return code, h.Partitions
}

func testSecurityTenants(t *testing.T, bin string) {
	dir := t.TempDir()
	e := &secEnv{t: t, bin: bin, data: filepath.Join(dir, "data"), out: filepath.Join(dir, "out"), issuer: newTestIssuer(t)}
	e.httpAddr = agentdtest.FreeAddr(t)
	natsAddr := agentdtest.FreeAddr(t)
	e.natsURL, e.metricsAddr = "nats://"+natsAddr, agentdtest.FreeAddr(t)
	_, port, _ := net.SplitHostPort(e.httpAddr)
	// HTTP on every address, without TLS: agentd warns.
	e.proc = startAgentd(t, bin, e.data, e.httpAddr, natsAddr, "--http", "0.0.0.0:"+port,
		"--auth", "--local-rate", "-1", "--metrics-listen", e.metricsAddr, "--js-max-store", "64MiB", "--max-turns", "2",
		"--oidc-issuer", e.issuer.srv.URL, "--oidc-audience", "forever", "--oidc-tenant-claim", "org")
	e.admin = filepath.Join(e.data, agentd.AdminCredsFile)

	t.Run("Startup", func(t *testing.T) {
		if !strings.Contains(e.proc.out.String(), "without TLS") || !strings.Contains(e.proc.out.String(), "--http listen on a non-loopback address") {
			t.Errorf("no warning for --auth on a public address without TLS:\n%s", e.proc.out.String())
		}
		if code, body := e.get(t, "/metrics", ""); code != http.StatusNotFound || !strings.Contains(body, "--metrics-listen") {
			t.Errorf("/metrics on the tenants' port: %d %s", code, body)
		}
		if v := metric(t, e.metricsAddr, "forever_http_connections_open"); v < 0 {
			t.Errorf("metrics listener: %v", v)
		}
	})

	t.Run("Frames", func(t *testing.T) { testFramesForbidden(t, e.httpAddr) })
	t.Run("MetricsHost", func(t *testing.T) {
		// The metrics listener answers loopback and address Hosts; a
		// DNS-rebinding name gets 403, as on --http.
		for host, want := range map[string]int{"localhost": http.StatusOK, "10.0.0.7:9464": http.StatusOK, "rebind.example:9464": http.StatusForbidden} {
			req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://"+e.metricsAddr+"/metrics", nil)
			req.Host = host
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != want {
				t.Errorf("/metrics with Host %s: %d, want %d", host, resp.StatusCode, want)
			}
		}
	})
	t.Run("ProbesPastConnCap", func(t *testing.T) { testProbesPastConnCap(t, e.httpAddr) })

	acme := e.mint(t, "acme")
	beta := e.mint(t, "beta")
	reader := e.mint(t, "acme", "--role", "reader", "--token-name", "ro")
	approver := e.mint(t, "acme", "--role", "approver", "--token-name", "ap")
	if acme.Role != "writer" || reader.Role != "reader" || reader.Cred != "ro" || acme.Limits.Bytes != 8<<20 || acme.Limits.Consumers != agentd.DefaultTenantConsumers {
		t.Fatalf("credentials: %+v %+v", acme, reader)
	}
	if code, body := e.post(t, acme.Token, "bot", "hello from acme"); code != 200 {
		t.Fatalf("writer chat: %d %.200s", code, body)
	}
	waitAnswered(t, e.httpAddr, acme.Token, "bot", "hello from acme")

	t.Run("Roles", func(t *testing.T) {
		if code, body := e.post(t, reader.Token, "bot", "a reader speaks"); code != http.StatusForbidden || !strings.Contains(body, "role reader") {
			t.Errorf("reader chat over HTTP: %d %s", code, body)
		}
		if code, body := e.post(t, approver.Token, "bot", "an approver speaks"); code != http.StatusForbidden {
			t.Errorf("approver starting a turn over HTTP: %d %s", code, body)
		}
		req, _ := http.NewRequest(http.MethodPost, "http://"+e.httpAddr+"/v1/chat/bot/stop", nil)
		req.Header.Set("Authorization", "Bearer "+reader.Token)
		if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusForbidden {
			t.Errorf("reader stop: %v %v", resp.StatusCode, err)
		}
		if code, body := e.get(t, "/v1/chat/bot/messages", reader.Token); code != 200 || !strings.Contains(body, "hello from acme") {
			t.Errorf("reader reads: %d %.200s", code, body)
		}
		if code, _ := e.get(t, "/debug/quarantine", acme.Token); code != http.StatusForbidden {
			t.Errorf("writer on /debug/quarantine: %d", code)
		}
		// Over NATS the server refuses the reader's chat; its reads pass.
		errs := make(chan error, 4)
		nc, err := nats.Connect(e.natsURL, nats.UserCredentials(reader.Creds), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { errs <- err }))
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		if _, err := nc.Request("forever.cmd.bot.messages", nil, 10*time.Second); err != nil {
			t.Errorf("reader messages over NATS: %v", err)
		}
		_, err = nc.Request("forever.cmd.bot.chat", []byte(`{"text":"sneaky"}`), 2*time.Second)
		if err == nil || !strings.Contains(strings.ToLower(err.Error()+fmt.Sprint(drain(errs))), "permissions violation") {
			t.Errorf("reader chat over NATS: %v", err)
		}
		anc, err := nats.Connect(e.natsURL, nats.UserCredentials(approver.Creds))
		if err != nil {
			t.Fatal(err)
		}
		defer anc.Close()
		m, err := anc.Request("forever.cmd.bot.approve", []byte(`{"toolCallId":"nope","approved":true}`), 10*time.Second)
		if err != nil || errCode(m) == "" || errCode(m) == "403" {
			t.Errorf("approver approve over NATS: %v %v", err, m.Header)
		}
	})

	t.Run("ReplySubjects", func(t *testing.T) { testSecurityReplySubjects(t, e, acme, reader) })
	t.Run("ReaderMeta", func(t *testing.T) { testSecurityReaderMeta(t, e, acme, reader) })
	t.Run("ReadsCountNoAgent", func(t *testing.T) { testSecurityReadsCountNoAgent(t, e) })

	t.Run("Expiry", func(t *testing.T) {
		short := e.mint(t, "acme", "--expires", "3s", "--token-name", "short")
		if short.Expires == "" {
			t.Fatalf("no expiry printed: %+v", short)
		}
		if code, _ := e.get(t, "/v1/chat/bot/messages", short.Token); code != 200 {
			t.Fatalf("a fresh short credential: %d", code)
		}
		exp, _ := time.Parse(time.RFC3339, short.Expires)
		time.Sleep(time.Until(exp) + 1500*time.Millisecond) // not a synchronisation: the point, the token's expiry passing
		if code, body := e.get(t, "/v1/chat/bot/messages", short.Token); code != http.StatusUnauthorized || !strings.Contains(body, "expired") {
			t.Errorf("an expired token: %d %s", code, body)
		}
		if nc, err := nats.Connect(e.natsURL, nats.UserCredentials(short.Creds)); err == nil {
			nc.Close()
			t.Error("expired creds accepted")
		}
	})

	t.Run("AccessTokenOnlyOnWebSocket", func(t *testing.T) {
		req, _ := http.NewRequest(http.MethodGet, "http://"+e.httpAddr+"/v1/chat/bot/messages?access_token="+acme.Token, nil)
		req.Header.Set("Upgrade", "websocket")
		req.Header.Set("Connection", "Upgrade")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("access_token on a non-WebSocket path: %d", resp.StatusCode)
		}
		c, _, err := websocket.Dial(t.Context(), "ws://"+e.httpAddr+"/v1/chat/bot/ws?access_token="+acme.Token, nil)
		if err != nil {
			t.Fatalf("access_token on the WebSocket path: %v", err)
		}
		c.CloseNow()
	})

	t.Run("NodeTurns", func(t *testing.T) {
		// --max-turns 2 holds across tenants: of four slow turns, two in
		// each tenant, two start at once; the others are refused at once
		// with 429 and Retry-After (not retried for 10 s into a 503), and
		// the node never runs more than two.
		var mu sync.Mutex
		var atOnce, later int
		var wg sync.WaitGroup
		done, peaked := make(chan struct{}), make(chan float64)
		go func() {
			peak := 0.0
			for {
				select {
				case <-done:
					peaked <- peak
					return
				case <-time.After(50 * time.Millisecond):
					peak = max(peak, labelled(t, e.metricsAddr, "forever_chat_node_turns_running"))
				}
			}
		}()
		for i, c := range []cred{acme, acme, beta, beta} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				t0 := time.Now()
				m := e.natsChat(t, c, fmt.Sprintf("slow%d", i), `/tool clock {"delayMs":3000}`)
				mu.Lock()
				defer mu.Unlock()
				switch took := time.Since(t0); {
				case errCode(m) == "" && took < 2*time.Second:
					atOnce++
				case errCode(m) == "429" && m.Header.Get("Retry-After") != "" && took < 2*time.Second:
					later++
				default:
					t.Errorf("turn %d: %v after %s", i, m.Header, took)
				}
			}()
		}
		wg.Wait()
		time.Sleep(200 * time.Millisecond) // not a synchronisation: the peak sampler's last looks after the turns
		close(done)
		peak := <-peaked
		if atOnce != 2 || later != 2 || peak > 2 {
			t.Errorf("four turns against --max-turns 2: %d started at once, %d refused at once, at most %v running", atOnce, later, peak)
		}
		for i := range 4 { // let the admitted ones end
			waitTurnEnded(t, e, []cred{acme, acme, beta, beta}[i], fmt.Sprintf("slow%d", i))
		}
	})

	t.Run("Consumers", func(t *testing.T) {
		greedy := e.mint(t, "greedy")
		nc, err := nats.Connect(e.natsURL, nats.UserCredentials(greedy.Creds))
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		js, _ := jetstream.NewWithAPIPrefix(nc, auth.ClientAPIPrefix)
		// Durable and push consumers are refused, saying why.
		for name, cc := range map[string]jetstream.ConsumerConfig{
			"durable_name":    {Durable: "d1", AckPolicy: jetstream.AckNonePolicy},
			"deliver_subject": {Name: "p1", AckPolicy: jetstream.AckNonePolicy},
		} {
			raw := map[string]any{"stream_name": eventlog.DefaultChunksStream, "config": cc}
			if name == "deliver_subject" {
				raw["config"] = map[string]any{"name": "p1", "deliver_subject": "forever.evt.bot", "ack_policy": "none"}
			}
			body, _ := json.Marshal(raw)
			m, err := nc.Request(auth.ClientAPIPrefix+".CONSUMER.CREATE."+eventlog.DefaultChunksStream+"."+cc.Name+cc.Durable, body, 5*time.Second)
			if err != nil || !strings.Contains(string(m.Data), `"code":403`) || !strings.Contains(string(m.Data), name) {
				t.Fatalf("a %s consumer: %v %s", name, err, m.Data)
			}
		}
		// Ephemeral ones, held 5 minutes unused, fill the tenant's quota.
		made, refusal := 0, error(nil)
		for i, waits := 0, 0; i < 1000; {
			_, err := js.CreateConsumer(t.Context(), eventlog.DefaultChunksStream, jetstream.ConsumerConfig{
				Name: fmt.Sprintf("c%d", i), InactiveThreshold: tenancy.MaxClientInactive, AckPolicy: jetstream.AckNonePolicy})
			if err != nil && strings.Contains(err.Error(), "over quota: more than") && waits < 1000 {
				// The tenant's API rate (its requests pass through
				// agentd): a client waits and goes on.
				waits++
				time.Sleep(20 * time.Millisecond) // not a synchronisation: a client's backoff on the tenant's API rate
				continue
			}
			if err != nil {
				refusal = err
				break
			}
			made++
			i++
		}
		if refusal == nil || !strings.Contains(refusal.Error(), "maximum consumers") || made >= agentd.DefaultTenantConsumers {
			t.Fatalf("1000 consumers: %d made, then %v", made, refusal)
		}
		// greedy's own chat cannot follow its stream: 429, not an empty 200.
		if code, body := e.post(t, greedy.Token, "g1", "hello"); code != http.StatusTooManyRequests || !strings.Contains(body, `"code":429`) {
			t.Errorf("greedy's chat past its consumers: %d %q", code, body)
		}
		t.Logf("a tenant made %d consumers, then: %v", made, refusal)
		if m := e.natsChat(t, beta, "beta1", "beta after greedy"); errCode(m) != "" {
			t.Fatalf("beta's chat while greedy holds its consumers: %v", m.Header)
		}
		waitAnswered(t, e.httpAddr, beta.Token, "beta1", "beta after greedy")
	})

	t.Run("ConnsAndSubs", func(t *testing.T) {
		// 1,000 connections and 100,000 subscriptions were accepted: the
		// account's connections and each credential's subscriptions are
		// bounded by default.
		conny := e.mint(t, "conny")
		opened := 0
		var refusal error
		for range 1000 {
			nc, err := nats.Connect(e.natsURL, nats.UserCredentials(conny.Creds), nats.NoReconnect())
			if err != nil {
				refusal = err
				break
			}
			defer nc.Close()
			opened++
		}
		if refusal == nil || opened >= agentd.DefaultTenantConns {
			t.Fatalf("1000 connections: %d opened, then %v", opened, refusal)
		}
		t.Logf("a tenant opened %d connections (agentd holds two: its user and its replier), then: %v", opened, refusal)
		subErrs := make(chan error, 1)
		nc, err := nats.Connect(e.natsURL, nats.UserCredentials(beta.Creds), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			select {
			case subErrs <- err:
			default:
			}
		}))
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		for i := range agentd.DefaultTenantSubs + 10 {
			nc.SubscribeSync(fmt.Sprintf("forever.chunk.x%d.>", i))
		}
		nc.Flush()
		select {
		case err := <-subErrs:
			if !strings.Contains(strings.ToLower(err.Error()), "maximum subscriptions") {
				t.Errorf("past the subscriptions limit: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("%d subscriptions on one connection were accepted", agentd.DefaultTenantSubs+10)
		}
	})

	t.Run("JetStreamAPIRate", func(t *testing.T) {
		// The API counts against the tenant's rate: 2,000 calls at a rate
		// of 5/s (burst 5) pass a handful; $JS.API itself is refused.
		chatty := e.mint(t, "chatty", "--rate", "5", "--burst", "5")
		errs := make(chan error, 16)
		nc, err := nats.Connect(e.natsURL, nats.UserCredentials(chatty.Creds), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			select {
			case errs <- err:
			default:
			}
		}))
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		if _, err := nc.Request("$JS.API.INFO", nil, 2*time.Second); err == nil || !strings.Contains(strings.ToLower(err.Error()+fmt.Sprint(drain(errs))), "permissions violation") {
			t.Errorf("$JS.API.INFO with a tenant's creds: %v", err)
		}
		start := time.Now()
		passed, limited := 0, 0
		for range 2000 {
			m, err := nc.Request(auth.ClientAPIPrefix+".INFO", nil, 5*time.Second)
			switch {
			case err != nil:
				t.Fatalf("API call: %v", err)
			case strings.Contains(string(m.Data), `"code":429`):
				limited++
			default:
				passed++
			}
		}
		if allowed := 5 + int(5*time.Since(start).Seconds()) + 2; passed > allowed || limited < 2000-allowed {
			t.Errorf("2000 API calls at 5/s in %s: %d passed, %d refused", time.Since(start), passed, limited)
		}
		t.Logf("2000 API calls at 5/s in %s: %d passed, %d refused", time.Since(start).Round(time.Millisecond), passed, limited)
		if code, _ := e.get(t, "/v1/chat/bot/messages", beta.Token); code != 200 {
			t.Errorf("beta after chatty's API calls: %d", code)
		}
	})

	t.Run("FillShare", func(t *testing.T) {
		parts0 := 0
		for deadline := time.Now().Add(30 * time.Second); parts0 == 0 && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) { // not a synchronisation: the interval of a poll on the node's ready partitions
			_, parts0 = e.readyPartitions(t)
		}
		filler := e.mint(t, "filler")
		pad := strings.Repeat("f", 200<<10)
		var last *nats.Msg
		n := 0
		for ; n < 200; n++ {
			last = e.natsChat(t, filler, fmt.Sprintf("fill%d", n), fmt.Sprintf("fill %d %s", n, pad))
			for tries := 0; errCode(last) == "429" && strings.Contains(last.Header.Get("Nats-Service-Error"), "too many turns") && tries < 100; tries++ { // --max-turns 2
				time.Sleep(50 * time.Millisecond) // not a synchronisation: a client's backoff on too many turns
				last = e.natsChat(t, filler, fmt.Sprintf("fill%d", n), fmt.Sprintf("fill %d %s", n, pad))
			}
			if errCode(last) != "" {
				break
			}
		}
		if errCode(last) != "429" || !strings.Contains(last.Header.Get("Nats-Service-Error"), "bytes") {
			t.Fatalf("filling its share: after %d chats %v", n, last.Header)
		}
		t.Logf("the filler was refused after %d chats of 200 KiB", n)
		// Its peers and the node go on: once the filler's last turns end
		// (--max-turns 2 is the node's, and they may still run), beta's
		// chat is taken.
		m := e.natsChat(t, beta, "beta2", "beta while filler is full")
		for tries := 0; errCode(m) == "429" && strings.Contains(m.Header.Get("Nats-Service-Error"), "too many turns") && tries < 100; tries++ {
			time.Sleep(50 * time.Millisecond) // not a synchronisation: a client's backoff on too many turns
			m = e.natsChat(t, beta, "beta2", "beta while filler is full")
		}
		if errCode(m) != "" {
			t.Fatalf("beta while the filler is full: %v", m.Header)
		}
		waitAnswered(t, e.httpAddr, beta.Token, "beta2", "beta while filler is full")
		if c, parts := e.readyPartitions(t); c != 200 || parts != parts0 {
			t.Fatalf("the node after the filler: readyz %d, %d partitions (was %d)", c, parts, parts0)
		}
	})

	t.Run("BytesAdmission", func(t *testing.T) {
		tiny := e.mint(t, "tiny", "--max-bytes", "1MiB")
		// Words: the local model echoes the first few, not 450 KiB. A turn
		// stores its message once (its request context holds no copy).
		if m := e.natsChat(t, tiny, "t1", "first "+strings.Repeat("ab ", 450<<10/3)); errCode(m) != "" {
			t.Fatalf("the first 450 KiB: %v", m.Header)
		}
		waitAnswered(t, e.httpAddr, tiny.Token, "t1")
		time.Sleep(1200 * time.Millisecond) // not a synchronisation: the stored bytes are read once a second, no observable condition
		big := "second-marker " + strings.Repeat("bc ", 320<<10/3)
		m := e.natsChat(t, tiny, "t1", big)
		if errCode(m) != "429" || !strings.Contains(m.Header.Get("Nats-Service-Error"), "bytes") {
			t.Fatalf("320 KiB with less than twice that left: %v", m.Header)
		}
		if code, body := e.get(t, "/v1/chat/t1/messages", tiny.Token); code != 200 || strings.Contains(body, "second-marker") {
			t.Fatalf("the refused message was stored: %d", code)
		}
		if m := e.natsChat(t, tiny, "t1", "small after the refusal"); errCode(m) != "" {
			t.Fatalf("a small chat after the refusal: %v (an active turn left behind?)", m.Header)
		}
		waitAnswered(t, e.httpAddr, tiny.Token, "t1", "small after the refusal")
	})

	t.Run("NegativeQuota", func(t *testing.T) {
		if _, stderr, code := tenantCLI(t, bin, "create", "neg", "--nats-url", e.natsURL, "--creds", e.admin, "--out", e.out, "--max-bytes", "-5"); code != 2 {
			t.Errorf("--max-bytes -5: exit %d %s", code, stderr)
		}
		nc, err := nats.Connect(e.natsURL, nats.UserCredentials(e.admin))
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		body, _ := json.Marshal(tenancy.CreateRequest{Name: "neg", Quota: auth.Quota{Bytes: -5}})
		m, err := nc.Request(tenancy.AdminCreateSubject, body, 30*time.Second)
		if err != nil || errCode(m) != "400" {
			t.Errorf("a negative quota sent to the admin service: %v %v", err, m.Header)
		}
	})

	t.Run("NATSDenials", func(t *testing.T) {
		before := strings.Count(e.proc.out.String(), "nats refused a client")
		nc, err := nats.Connect(e.natsURL, nats.UserCredentials(acme.Creds), nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
		if err != nil {
			t.Fatal(err)
		}
		// In rounds of 1,000, each flushed (the server has read it when
		// its PONG comes back): 20,000 at once, on a loaded machine, had
		// the server answer so many -ERRs that the connection went before
		// it read them all (16,124 counted once on CI).
		start := time.Now()
		for round := range 20 {
			for range 1000 {
				nc.Publish("forever.evt.bot", []byte("{}"))
			}
			if err := nc.FlushTimeout(30 * time.Second); err != nil {
				t.Fatalf("the server did not read round %d of the denied publishes: %v", round, err)
			}
		}
		nc.Close()
		var denials float64
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) { // not a synchronisation: the interval of a poll on the denials metric
			if denials = labelled(t, e.metricsAddr, `forever_nats_denials_total{kind="publish"}`); denials >= 20000 {
				break
			}
		}
		lines := strings.Count(e.proc.out.String(), "nats refused a client") - before
		t.Logf("20000 denied publishes: %v counted, %d log lines", denials, lines)
		if denials < 20000 || lines > int(time.Since(start).Seconds())+3 {
			t.Errorf("20000 denied publishes: %v counted, %d log lines in %s", denials, lines, time.Since(start))
		}
	})

	t.Run("DisableEnableRevoke", func(t *testing.T) {
		oidcTok := e.issuer.token(t, map[string]any{"org": "acme"}, nil)
		path := "/v1/chat/bot/messages"
		if code, body := e.get(t, path, oidcTok); code != 200 {
			t.Fatalf("OIDC token: %d %s", code, body)
		}
		ws, _, err := websocket.Dial(t.Context(), "ws://"+e.httpAddr+"/v1/chat/bot/ws?access_token="+acme.Token, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer ws.CloseNow()
		wsClosed := make(chan error, 1)
		go func() {
			for {
				if _, _, err := ws.Read(context.Background()); err != nil {
					wsClosed <- err
					return
				}
			}
		}()
		natsClosed := make(chan struct{})
		live, err := nats.Connect(e.natsURL, nats.UserCredentials(acme.Creds), nats.NoReconnect(), nats.ClosedHandler(func(*nats.Conn) { close(natsClosed) }))
		if err != nil {
			t.Fatal(err)
		}
		defer live.Close()

		if out := e.admin1(t, "disable", "acme"); !strings.Contains(out, `"disabled":true`) {
			t.Fatalf("disable: %s", out)
		}
		for name, tok := range map[string]string{"API token": acme.Token, "reader token": reader.Token, "OIDC token": oidcTok} {
			if code, body := e.get(t, path, tok); code != http.StatusForbidden || !strings.Contains(body, "disabled") {
				t.Errorf("%s of a disabled tenant: %d %s", name, code, body)
			}
		}
		select {
		case <-wsClosed:
		case <-time.After(10 * time.Second):
			t.Error("a disabled tenant's WebSocket is still open")
		}
		select {
		case <-natsClosed:
		case <-time.After(10 * time.Second):
			t.Error("a disabled tenant's NATS connection is still open")
		}
		if nc, err := nats.Connect(e.natsURL, nats.UserCredentials(acme.Creds)); err == nil {
			nc.Close()
			t.Error("a disabled tenant's creds connect")
		}
		if code, _ := e.get(t, path, beta.Token); code != 200 {
			t.Errorf("beta while acme is disabled: %d", code)
		}

		if out := e.admin1(t, "enable", "acme"); !strings.Contains(out, `"disabled":false`) {
			t.Fatalf("enable: %s", out)
		}
		if code, body := e.get(t, path, acme.Token); code != 200 || !strings.Contains(body, "hello from acme") {
			t.Fatalf("after enable: %d %.200s", code, body)
		}
		if code, _ := e.get(t, path, oidcTok); code != 200 {
			t.Fatalf("OIDC after enable: %d", code)
		}

		// One credential: ro goes, the others stay.
		if out := e.admin1(t, "token", "revoke", "acme", "ro"); !strings.Contains(out, `"revoked":true`) {
			t.Fatalf("token revoke: %s", out)
		}
		if code, _ := e.get(t, path, reader.Token); code != http.StatusUnauthorized {
			t.Errorf("a revoked token: %d", code)
		}
		if code, _ := e.get(t, path, acme.Token); code != 200 {
			t.Errorf("another token after a token revoke: %d", code)
		}

		// Everything: tokens and OIDC tokens issued until now.
		time.Sleep(1100 * time.Millisecond) // not a synchronisation: iat counts in seconds, time must pass
		if out := e.admin1(t, "revoke", "acme"); !strings.Contains(out, `"revoked":`) {
			t.Fatalf("revoke: %s", out)
		}
		for name, tok := range map[string]string{"API token": acme.Token, "OIDC token": oidcTok} {
			if code, _ := e.get(t, path, tok); code != http.StatusUnauthorized {
				t.Errorf("%s after revoke: %d", name, code)
			}
		}
		time.Sleep(1100 * time.Millisecond) // not a synchronisation: iat counts in seconds, time must pass
		if code, body := e.get(t, path, e.issuer.token(t, map[string]any{"org": "acme"}, nil)); code != 200 {
			t.Errorf("an OIDC token issued after the revocation: %d %s", code, body)
		}
		if code, _ := e.get(t, path, beta.Token); code != 200 {
			t.Errorf("beta after acme's revocation: %d", code)
		}
	})

	t.Run("Audit", func(t *testing.T) {
		var recs []audit.Record
		want := []func(audit.Record) bool{
			func(r audit.Record) bool {
				return r.Action == "tenant.create" && r.Tenant == "acme" && r.Cred == "admin" && strings.Contains(r.Detail, "cred ro")
			},
			func(r audit.Record) bool {
				return r.Action == "chat" && r.Tenant == "acme" && r.Cred == acme.Cred && r.Role == "writer" && r.Agent == "bot" && r.Outcome == audit.OK && r.From != ""
			},
			func(r audit.Record) bool {
				return r.Action == "chat" && r.Tenant == "acme" && r.Cred == "ro" && r.Outcome == audit.Refused && r.Code == 403
			},
			func(r audit.Record) bool {
				return r.Action == "chat" && r.Tenant == "beta" && r.Cred == tenancy.NATSCred && r.Agent == "beta1"
			},
			func(r audit.Record) bool {
				return r.Action == "auth.refused" && r.Tenant == "acme" && r.Cred == "short" && strings.Contains(r.Detail, "expired") && r.From != ""
			},
			func(r audit.Record) bool {
				return r.Action == "nats.denied" && r.Tenant == "acme" && r.Cred == acme.Cred
			},
			func(r audit.Record) bool { return r.Action == "tenant.disable" && r.Tenant == "acme" },
			func(r audit.Record) bool { return r.Action == "tenant.enable" && r.Tenant == "acme" },
			func(r audit.Record) bool {
				return r.Action == "tenant.token.revoke" && r.Tenant == "acme" && strings.Contains(r.Detail, "cred ro")
			},
			func(r audit.Record) bool { return r.Action == "tenant.revoke" && r.Tenant == "acme" },
			func(r audit.Record) bool { return r.Action == "tenant.create" && r.Tenant == "neg" && r.Code == 400 },
		}
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(200 * time.Millisecond) { // not a synchronisation: the interval of a poll on the audit records
			out, err := exec.Command(bin, "audit", "tail", "-n", "0", "--nats-url", e.natsURL, "--creds", e.admin).Output()
			if err != nil {
				t.Fatalf("audit tail: %v", err)
			}
			recs = recs[:0]
			for line := range strings.Lines(string(out)) {
				var r audit.Record
				if err := json.Unmarshal([]byte(line), &r); err != nil {
					t.Fatalf("audit tail printed %q", line)
				}
				recs = append(recs, r)
			}
			missing := -1
			for i, w := range want {
				found := false
				for _, r := range recs {
					found = found || w(r)
				}
				if !found {
					missing = i
					break
				}
			}
			if missing < 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the audit log lacks expected record %d among %d records:\n%s", missing, len(recs), string(out))
			}
		}
		for _, r := range recs {
			b, _ := json.Marshal(r)
			if strings.Contains(string(b), "fvr_") || strings.Contains(string(b), "-----BEGIN") {
				t.Fatalf("a record holds a secret: %s", b)
			}
		}
		t.Logf("%d audit records", len(recs))
	})

	t.Run("AuditActors", func(t *testing.T) { testSecurityAuditActors(t, e) })

	t.Run("DataDirPerms", func(t *testing.T) {
		n := 0
		err := filepath.WalkDir(e.data, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			fi, err := d.Info()
			if err != nil {
				return nil // removed meanwhile
			}
			if fi.Mode().Perm()&0o077 != 0 && fi.Mode()&fs.ModeSymlink == 0 {
				t.Errorf("%s has mode %o", p, fi.Mode().Perm())
			}
			n++
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%d files and dirs under the data dir, none readable by others", n)
	})
}

// waitTurnEnded waits until agent of c has no active turn (its status
// says so, or a chat is no longer 409).
func waitTurnEnded(t *testing.T, e *secEnv, c cred, agent string) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) { // not a synchronisation: the interval of a poll on the turn's assistant message
		code, body := e.get(t, "/v1/chat/"+agent+"/messages", c.Token)
		if code == 200 && (strings.Count(body, `"role":"assistant"`) >= strings.Count(body, `"role":"user"`)) {
			return
		}
	}
}

// labelled reads one labelled series from a /metrics address (0 when
// absent).
func labelled(t *testing.T, addr, series string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), series+" "); ok {
			f, _ := strconv.ParseFloat(v, 64)
			return f
		}
	}
	return 0
}

// drain returns the errors errs holds now.
func drain(errs chan error) []error {
	var out []error
	for {
		select {
		case err := <-errs:
			out = append(out, err)
		case <-time.After(500 * time.Millisecond):
			return out
		}
	}
}

// testSecurityAuditActors: the admin's delete of a tenant's agent is
// audited as the admin (not as the tenant's NATS credential), and an
// admin credential minted with agentd auth admin-creds against the
// running agentd is audited as the admin.
func testSecurityAuditActors(t *testing.T, e *secEnv) {
	if out, err := exec.Command(e.bin, "delete", "beta1", "--tenant", "beta", "--server", e.natsURL, "--creds", e.admin).CombinedOutput(); err != nil {
		t.Fatalf("delete beta1 --tenant beta: %v\n%s", err, out)
	}
	cmd := exec.Command(e.bin, "auth", "admin-creds", "--data", e.data, "--server", e.natsURL)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if out, err := cmd.Output(); err != nil || !strings.Contains(string(out), "NATS USER JWT") {
		t.Fatalf("auth admin-creds: %v\n%s", err, stderr.String())
	}
	if stderr.Len() != 0 {
		t.Fatalf("auth admin-creds against the running agentd said: %s", stderr.String())
	}
	want := map[string]func(audit.Record) bool{
		"delete as admin": func(r audit.Record) bool {
			return r.Action == "delete" && r.Tenant == "beta" && r.Agent == "beta1" && r.Cred == tenancy.AdminCred && r.Role == "admin" && r.Outcome == audit.OK
		},
		"admin.creds": func(r audit.Record) bool {
			return r.Action == "admin.creds" && r.Tenant == "" && r.Cred == tenancy.AdminCred && r.Outcome == audit.OK
		},
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(200 * time.Millisecond) { // not a synchronisation: the interval of a poll on the audit records
		out, err := exec.Command(e.bin, "audit", "tail", "-n", "0", "--nats-url", e.natsURL, "--creds", e.admin).Output()
		if err != nil {
			t.Fatalf("audit tail: %v", err)
		}
		for name, w := range want {
			for line := range strings.Lines(string(out)) {
				var r audit.Record
				if json.Unmarshal([]byte(line), &r) == nil && w(r) {
					delete(want, name)
					break
				}
			}
		}
		if len(want) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the audit log lacks %v:\n%s", slices.Collect(maps.Keys(want)), out)
		}
	}
}
