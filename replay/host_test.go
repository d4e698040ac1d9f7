package replay_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/coder/websocket"
	"github.com/forever-agents/forever/internal/apierror"
	"github.com/forever-agents/forever/internal/apierror/apierrortest"
	"github.com/forever-agents/forever/replay"
)

func TestHostPattern(t *testing.T) {
	tests := []struct {
		pattern string
		match   []string
		nomatch []string
	}{
		{"app.example.com", []string{"app.example.com", "APP.Example.com:8080", "app.example.com.", "app.example.com:443"},
			[]string{"example.com", "x.app.example.com", "app.example.com.evil.net", "app.example.co", ""}},
		{"app.example.com:8080", []string{"app.example.com:8080"}, []string{"app.example.com", "app.example.com:80"}},
		{"app.example.com:*", []string{"app.example.com", "app.example.com:1"}, []string{"b.example.com"}},
		{"*.example.com", []string{"a.example.com", "a.b.example.com:9"}, []string{"example.com", "aexample.com", "a.example.com.evil.net"}},
		{"192.168.1.5", []string{"192.168.1.5", "192.168.1.5:8080"}, []string{"192.168.1.50", "192.168.1.5.nip.io"}},
		{"[2001:db8::1]:8080", []string{"[2001:db8::1]:8080", "[2001:DB8:0::1]:8080"}, []string{"[2001:db8::1]", "[2001:db8::2]:8080"}},
		{"2001:db8::1", []string{"[2001:db8::1]", "[2001:db8::1]:1"}, []string{"[2001:db8::2]"}},
		{"Local.Test.", []string{"local.test:1"}, nil},
		{"10.0.0.7.", []string{"10.0.0.7", "10.0.0.7.:80"}, []string{"10.0.0.70", "x.10.0.0.7"}},
	}
	for _, tt := range tests {
		p, err := replay.ParseHostPattern(tt.pattern)
		if err != nil {
			t.Errorf("ParseHostPattern(%q): %v", tt.pattern, err)
			continue
		}
		for _, h := range tt.match {
			if !p.Match(h) {
				t.Errorf("%q does not match Host %q", tt.pattern, h)
			}
		}
		for _, h := range tt.nomatch {
			if p.Match(h) {
				t.Errorf("%q matches Host %q", tt.pattern, h)
			}
		}
	}
	for _, bad := range []string{"", "*", "*:8080", "http://app.example.com", "app.example.com/x", "a.*.com", "app*.example.com",
		"app.example.com:0", "app.example.com:65536", "app.example.com:http", "app.example.com:", "[::1", "[x]:1", "fe80::1%eth0", "a b", "user@host", "a..b"} {
		_, err := replay.ParseHostPattern(bad)
		if !errors.Is(err, replay.ErrBadHostPattern) {
			t.Errorf("ParseHostPattern(%q) = %v, want ErrBadHostPattern", bad, err)
		}
	}
	for host, want := range map[string]bool{
		"localhost": true, "LOCALHOST:8080": true, "localhost.": true, "app.localhost:3000": true,
		"127.0.0.1": true, "127.1.2.3:80": true, "[::1]:8080": true, "::1": true, "[::ffff:127.0.0.1]:1": true,
		"evil.example:8080": false, "localhost.evil.net": false, "0.0.0.0:8080": false, "10.0.0.1": false, "": false, "[::2]": false,
	} {
		if got := replay.IsLoopbackHost(host); got != want {
			t.Errorf("IsLoopbackHost(%q) = %v, want %v", host, got, want)
		}
	}
}

// TestHostCheckRefusesDNSRebinding: with auth off, a request whose Host is
// a name the attacker points at 127.0.0.1, with the matching Origin, is
// refused with 403 before the gateway runs anything (the gateway alone
// takes it as same-origin and starts a turn); loopback and listed hosts
// are served, over HTTP and WebSocket.
func TestHostCheckRefusesDNSRebinding(t *testing.T) {
	e := newEnv(t)
	allowed, err := replay.ParseHostPatterns([]string{"agents.example.com"})
	if err != nil {
		t.Fatal(err)
	}
	checked := httptest.NewServer(replay.HostCheck(allowed, e.gw))
	t.Cleanup(checked.Close)
	// rebind sends what the attacker's page sends, and reads the answer
	// unless it is a stream (which a turn that writes nothing never ends).
	rebind := func(base string) (*http.Response, string) {
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "POST", base+"/v1/chat", strings.NewReader(body("c1")))
		req.Host = "evil.example:8080"
		req.Header.Set("Origin", "http://evil.example:8080")
		req.Header.Set("Content-Type", "text/plain")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			return resp, ""
		}
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}

	resp, b := rebind(checked.URL)
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("rebinding request: %d %s, want 403", resp.StatusCode, b)
	}
	t.Log(apierrortest.CheckBody(t, "host refused", 403, []byte(b)))
	select {
	case ft := <-e.chats.started:
		t.Fatalf("a rebinding request started a turn: %+v", ft)
	default:
	}
	// The gateway without the check is what the attack reaches.
	if resp, b := rebind(e.srv.URL); resp.StatusCode != http.StatusOK {
		t.Fatalf("control: the gateway alone answered %d %s; the test no longer shows the attack", resp.StatusCode, b)
	}
	e.turn(t)

	for _, host := range []string{"", "localhost", "127.0.0.1", "[::1]:8080", "agents.example.com", "agents.example.com:443"} {
		req, _ := http.NewRequestWithContext(t.Context(), "GET", checked.URL+"/v1/chat/c1/messages", nil)
		if host != "" {
			req.Host = host
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("Host %q: %d, want 200", req.Host, resp.StatusCode)
		}
	}
	ws := "ws" + strings.TrimPrefix(checked.URL, "http") + "/v1/chat/c1/ws"
	_, resp, err = websocket.Dial(t.Context(), ws, &websocket.DialOptions{Host: "evil.example:8080", HTTPHeader: http.Header{"Origin": {"http://evil.example:8080"}}})
	if err == nil || resp == nil || resp.StatusCode != http.StatusForbidden {
		t.Fatalf("rebinding WebSocket: %v %v, want 403", err, resp)
	}
}

// fakeAuth is a bearer-token check as agentd puts in front of the gateway.
func fakeAuth(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer good" {
			apierror.New(apierror.Unauthorized, "send a token: Authorization: Bearer <token>").WriteHTTP(w)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// TestCORSInFrontOfAuth: with CORS in front of the authentication, an
// allowed origin's preflight is answered 204 without credentials (behind
// the authentication it gets 401 without CORS headers, so the browser
// gives up), a request without a token gets a 401 the page can read, one
// with a token is served once, and another origin gets 403 before the
// authentication runs.
func TestCORSInFrontOfAuth(t *testing.T) {
	origin := "https://app.example.com"
	e := newEnv(t, func(c *replay.GatewayConfig) { c.AllowedOrigins = []string{origin} })
	for name, h := range map[string]http.Handler{
		"CORS":         replay.CORS([]string{origin}, fakeAuth(e.gw)),
		"Gateway.CORS": e.gw.CORS(fakeAuth(e.gw)),
	} {
		t.Run(name, func(t *testing.T) {
			srv := httptest.NewServer(h)
			t.Cleanup(srv.Close)
			preflight := map[string]string{"Origin": origin, "Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "authorization, content-type"}
			resp, _ := do(t, "OPTIONS", srv.URL+"/v1/chat", preflight, "")
			if resp.StatusCode != http.StatusNoContent || resp.Header.Get("Access-Control-Allow-Origin") != origin ||
				!strings.Contains(resp.Header.Get("Access-Control-Allow-Headers"), "authorization") {
				t.Fatalf("preflight: %d %v", resp.StatusCode, resp.Header)
			}
			resp, b := do(t, "GET", srv.URL+"/v1/chat/c1/messages", map[string]string{"Origin": origin}, "")
			if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("Access-Control-Allow-Origin") != origin {
				t.Fatalf("no token: %d %v %s", resp.StatusCode, resp.Header, b)
			}
			resp, b = do(t, "GET", srv.URL+"/v1/chat/c1/messages", map[string]string{"Origin": origin, "Authorization": "Bearer good"}, "")
			if resp.StatusCode != http.StatusOK || len(resp.Header.Values("Access-Control-Allow-Origin")) != 1 || len(resp.Header.Values("Vary")) != 1 {
				t.Fatalf("with a token: %d %v %s", resp.StatusCode, resp.Header, b)
			}
			resp, b = do(t, "OPTIONS", srv.URL+"/v1/chat", map[string]string{"Origin": "https://evil.example.net", "Access-Control-Request-Method": "POST"}, "")
			if resp.StatusCode != http.StatusForbidden || resp.Header.Get("Access-Control-Allow-Origin") != "" {
				t.Fatalf("another origin: %d %v %s", resp.StatusCode, resp.Header, b)
			}
			apierrortest.CheckBody(t, "origin refused", 403, []byte(b))
		})
	}
	// Behind the authentication, as before: the preflight fails.
	srv := httptest.NewServer(fakeAuth(e.gw))
	t.Cleanup(srv.Close)
	resp, _ := do(t, "OPTIONS", srv.URL+"/v1/chat", map[string]string{"Origin": origin, "Access-Control-Request-Method": "POST"}, "")
	if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("Access-Control-Allow-Origin") != "" {
		t.Fatalf("control: preflight behind auth %d %v; the test no longer shows the problem", resp.StatusCode, resp.Header)
	}
}

// FuzzHostPattern: any --allowed-host value parses or is refused with
// ErrBadHostPattern; a parsed pattern prints as a pattern that parses to
// one matching the same Hosts; matching ignores the case of names; a
// wildcard never matches its domain itself; no pattern matches an empty
// Host; and HostAllowed without patterns is exactly IsLoopbackHost.
func FuzzHostPattern(f *testing.F) {
	for _, s := range [][2]string{
		{"app.example.com", "app.example.com:8080"}, {"*.example.com", "a.example.com"}, {"*.example.com", "example.com"},
		{"host:8080", "host:8080"}, {"192.168.1.5", "192.168.1.5:80"}, {"[::1]:8080", "[::1]:8080"}, {"2001:db8::1", "[2001:db8::1]"},
		{"*", "x"}, {"http://x", "x"}, {"a.*.b", "a.x.b"}, {"x:0", "x"}, {"localhost", "evil.example:8080"}, {"Ex.COM.", "ex.com"},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, pattern, host string) {
		if replay.HostAllowed(nil, host) != replay.IsLoopbackHost(host) {
			t.Fatalf("HostAllowed(nil, %q) differs from IsLoopbackHost", host)
		}
		p, err := replay.ParseHostPattern(pattern)
		if err != nil {
			if !errors.Is(err, replay.ErrBadHostPattern) {
				t.Fatalf("ParseHostPattern(%q): %v", pattern, err)
			}
			return
		}
		back, err := replay.ParseHostPattern(p.String())
		if err != nil || back != p {
			t.Fatalf("ParseHostPattern(%q) = %v, which parses back as %v, %v", pattern, p, back, err)
		}
		m := p.Match(host)
		if m && host == "" {
			t.Fatalf("%q matches an empty Host", pattern)
		}
		if m != p.Match(strings.ToUpper(host)) && !strings.ContainsAny(host, "[]") {
			t.Fatalf("%q matches %q but not in upper case, or the reverse", pattern, host)
		}
		if m != replay.HostAllowed([]replay.HostPattern{p}, host) && !replay.IsLoopbackHost(host) {
			t.Fatalf("HostAllowed([%q], %q) differs from Match", pattern, host)
		}
		if apex, ok := strings.CutPrefix(p.String(), "*."); ok {
			apex, _, _ = strings.Cut(apex, ":")
			if p.Match(apex) {
				t.Fatalf("wildcard %q matches its domain %q", pattern, apex)
			}
		}
	})
}
