package agentd_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/forever-agents/forever/agentd"
	"github.com/forever-agents/forever/agentd/agentdtest"
	"github.com/forever-agents/forever/internal/waitfor"
)

// closedWithin reads c until the server closes it; it fails the test if
// the connection is still open after limit (a bound far above the
// configured timeouts: it tells "closed" from "left open", not how fast).
func closedWithin(t *testing.T, c net.Conn, limit time.Duration, what string) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(limit))
	_, err := io.Copy(io.Discard, c)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatalf("%s: the connection is still open after %s", what, limit)
	}
}

// TestHTTPTimeouts: a connection that sends no headers, a body that
// trickles and an idle kept-alive connection are closed by the server; a
// response streaming long after its body was read is not cut.
func TestHTTPTimeouts(t *testing.T) {
	cfg := agentdtest.Config(t)
	cfg.HTTPReadHeaderTimeout = 300 * time.Millisecond
	cfg.HTTPBodyTimeout = 300 * time.Millisecond
	cfg.HTTPIdleTimeout = 500 * time.Millisecond
	d, err := agentd.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	d.HandleFunc("POST /read", func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.ReadAll(r.Body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	d.HandleFunc("POST /stream", func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.ReadAll(r.Body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.WriteHeader(http.StatusOK)
		for i := range 15 { // 1.5s: past the body and idle timeouts
			select {
			case <-r.Context().Done():
				return
			case <-time.After(100 * time.Millisecond):
			}
			fmt.Fprintf(w, "line %d\n", i)
			http.NewResponseController(w).Flush()
		}
		fmt.Fprintln(w, "end")
	})
	agentdtest.Start(t, d)
	addr := d.HTTPAddr()
	dial := func() net.Conn {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}

	t.Run("NoHeaders", func(t *testing.T) {
		c := dial()
		c.Write([]byte("GET /healthz HTTP/1.1\r\nHost: x\r\n")) // never ends
		closedWithin(t, c, 10*time.Second, "headers never ended")
	})
	t.Run("SlowBody", func(t *testing.T) {
		c := dial()
		c.Write([]byte("POST /read HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\nabc"))
		stop := make(chan struct{})
		defer close(stop)
		go func() { // a byte every 100ms: never idle, never done
			for {
				select {
				case <-stop:
					return
				case <-time.After(100 * time.Millisecond):
					if _, err := c.Write([]byte("x")); err != nil {
						return
					}
				}
			}
		}()
		closedWithin(t, c, 10*time.Second, "slow body")
	})
	t.Run("Idle", func(t *testing.T) {
		c := dial()
		c.Write([]byte("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		closedWithin(t, c, 10*time.Second, "idle kept-alive connection")
	})
	t.Run("StreamOutlivesTimeouts", func(t *testing.T) {
		resp, err := http.Post("http://"+addr+"/stream", "text/plain", strings.NewReader("hello"))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil || !strings.HasSuffix(string(b), "end\n") {
			t.Fatalf("the stream was cut: %v %q", err, b)
		}
	})
}

// TestHTTPMaxConns: past --http-max-conns a connection gets 503 with
// Retry-After, except a probe (/healthz, /readyz), which is answered; once
// a connection closes, the next is served.
func TestHTTPMaxConns(t *testing.T) {
	cfg := agentdtest.Config(t)
	cfg.HTTPMaxConns = 2
	d, err := agentd.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	agentdtest.Start(t, d)
	addr := d.HTTPAddr()
	get := func(path string) (*http.Response, net.Conn) {
		t.Helper()
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Write([]byte("GET " + path + " HTTP/1.1\r\nHost: localhost\r\n\r\n")); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		c.SetDeadline(time.Time{})
		return resp, c
	}
	agentdtest.WaitStatus(t, "http://"+addr+"/readyz", http.StatusOK)
	http.DefaultClient.CloseIdleConnections()
	// Hold both slots with kept-alive connections; a probe answered past
	// the bound (the server has yet to see an earlier connection closed)
	// comes back with Connection: close and does not count.
	var held []net.Conn
	for deadline := time.Now().Add(10 * time.Second); len(held) < 2; {
		resp, c := get("/healthz")
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("within the bound: %d", resp.StatusCode)
		}
		if !resp.Close {
			held = append(held, c)
		} else if time.Now().After(deadline) {
			t.Fatal("no slot came free")
		}
	}
	resp, _ := get("/nothing")
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("past the bound: %d %v, want 503 with Retry-After", resp.StatusCode, resp.Header)
	}
	for _, probe := range []string{"/healthz", "/readyz"} {
		if resp, _ := get(probe); resp.StatusCode != http.StatusOK || !resp.Close {
			t.Errorf("%s past the bound: %d (close %v), want 200 and the connection closed", probe, resp.StatusCode, resp.Close)
		}
	}
	held[0].Close()
	waitfor.True(t, "a slot freed by a closed connection to be given back", func() bool {
		resp, c := get("/nothing")
		c.Close()
		return resp.StatusCode != http.StatusServiceUnavailable
	})
}

// TestMetricsListener: with --metrics-listen, /metrics is served there and
// refused on the HTTP port; the listener answers loopback hosts, IP
// addresses and --allowed-host, and refuses other names (DNS rebinding).
func TestMetricsListener(t *testing.T) {
	cfg := agentdtest.Config(t)
	cfg.MetricsListen = "127.0.0.1:0"
	cfg.AllowedHosts = []string{"metrics.example.com"}
	d, err := agentd.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	agentdtest.Start(t, d)
	if d.MetricsAddr() == "" {
		t.Fatal("no metrics address")
	}
	code, body := agentdtest.Get(t, "http://"+d.MetricsAddr()+"/metrics")
	if code != http.StatusOK || !strings.Contains(body, "forever_agentd_ready") {
		t.Fatalf("metrics listener: %d %.200s", code, body)
	}
	if code, body := agentdtest.Get(t, "http://"+d.HTTPAddr()+"/metrics"); code != http.StatusNotFound || !strings.Contains(body, "--metrics-listen") {
		t.Fatalf("/metrics on the HTTP port: %d %s", code, body)
	}
	for _, tc := range []struct {
		host string
		want int
	}{
		{"localhost:9464", http.StatusOK},
		{"10.1.2.3:9464", http.StatusOK},
		{"[fd00::1]:9464", http.StatusOK},
		{"metrics.example.com", http.StatusOK},
		{"evil.example:9464", http.StatusForbidden},
		{"metrics.example.com.evil.example", http.StatusForbidden},
	} {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://"+d.MetricsAddr()+"/metrics", nil)
		req.Host = tc.host
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("Host %s: %d, want %d", tc.host, resp.StatusCode, tc.want)
		}
	}
}

// TestPprof: with --pprof, Go's profiles are served under /debug/pprof/
// on the metrics listener; without it they are not; and --pprof without a
// metrics listener is refused, naming --metrics-listen.
func TestPprof(t *testing.T) {
	for _, on := range []bool{true, false} {
		cfg := agentdtest.Config(t)
		cfg.MetricsListen = "127.0.0.1:0"
		cfg.Pprof = on
		d, err := agentd.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		agentdtest.Start(t, d)
		code, body := agentdtest.Get(t, "http://"+d.MetricsAddr()+"/debug/pprof/cmdline")
		if want := map[bool]int{true: http.StatusOK, false: http.StatusNotFound}[on]; code != want {
			t.Errorf("--pprof=%v: /debug/pprof/cmdline %d %.200s, want %d", on, code, body, want)
		}
	}
	cfg := agentdtest.Config(t)
	cfg.Pprof = true
	if _, err := agentd.New(cfg); !errors.Is(err, agentd.ErrConfig) || !strings.Contains(err.Error(), "--metrics-listen") {
		t.Errorf("--pprof without a metrics listener: %v, want ErrConfig naming --metrics-listen", err)
	}
}

// TestFrameHeaders: every response forbids framing by other origins
// (CSP frame-ancestors 'self', X-Frame-Options DENY); with
// --frame-ancestors, CSP lists them and X-Frame-Options is left out; a
// page's own CSP is kept beside it.
func TestFrameHeaders(t *testing.T) {
	for _, tc := range []struct {
		name      string
		ancestors []string
		wantCSP   string
		wantXFO   string
	}{
		{"default", nil, "frame-ancestors 'self'", "DENY"},
		{"listed", []string{"https://Portal.example.com/", "https://*.example.org:8443"}, "frame-ancestors 'self' https://portal.example.com https://*.example.org:8443", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := agentdtest.Config(t)
			cfg.FrameAncestors = tc.ancestors
			d, err := agentd.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			d.HandleFunc("GET /page", func(w http.ResponseWriter, r *http.Request) {
				w.Header().Add("Content-Security-Policy", "default-src 'self'")
				w.Header().Set("Content-Type", "text/html")
				io.WriteString(w, "<p>hi</p>")
			})
			agentdtest.Start(t, d)
			for _, path := range []string{"/page", "/healthz", "/nothing"} {
				resp, err := http.Get("http://" + d.HTTPAddr() + path)
				if err != nil {
					t.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				csp := resp.Header.Values("Content-Security-Policy")
				if len(csp) == 0 || csp[0] != tc.wantCSP {
					t.Errorf("%s: Content-Security-Policy %q, want %q first", path, csp, tc.wantCSP)
				}
				if path == "/page" && (len(csp) != 2 || csp[1] != "default-src 'self'") {
					t.Errorf("%s: Content-Security-Policy %q, want the page's own kept", path, csp)
				}
				if got := resp.Header.Get("X-Frame-Options"); got != tc.wantXFO {
					t.Errorf("%s: X-Frame-Options %q, want %q", path, got, tc.wantXFO)
				}
			}
		})
	}
}
