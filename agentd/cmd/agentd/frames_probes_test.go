package main

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/forever-agents/forever/agentd"
)

// testFramesForbidden: the chat page (/) and the console (/console), which
// need no token, forbid framing by other origins: Content-Security-Policy
// frame-ancestors 'self' and X-Frame-Options: DENY (issue 32:
// clickjacking a click on an approval).
func testFramesForbidden(t *testing.T, httpAddr string) {
	for _, path := range []string{"/", "/console"} {
		resp, err := http.Get("http://" + httpAddr + path)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
			t.Errorf("GET %s: %s %q, want an HTML page", path, resp.Status, resp.Header.Get("Content-Type"))
		}
		framing := false
		for _, v := range resp.Header.Values("Content-Security-Policy") {
			framing = framing || v == "frame-ancestors 'self'"
		}
		if !framing || resp.Header.Get("X-Frame-Options") != "DENY" {
			t.Errorf("GET %s: Content-Security-Policy %q, X-Frame-Options %q; want frame-ancestors 'self' and DENY",
				path, resp.Header.Values("Content-Security-Policy"), resp.Header.Get("X-Frame-Options"))
		}
	}
}

// rawGet sends GET path on a new connection and reads the answer; the
// connection is returned open (kept alive unless the answer said close).
func rawGet(addr, path string) (*http.Response, string, net.Conn, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, "", nil, err
	}
	c.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: localhost\r\n\r\n"); err != nil {
		c.Close()
		return nil, "", nil, err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		c.Close()
		return nil, "", nil, err
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	c.SetDeadline(time.Time{})
	return resp, string(b), c, nil
}

// testProbesPastConnCap: with agentd.DefaultHTTPMaxConns (4,096) idle
// kept-alive connections held open, the HTTP port is at its cap (a request
// gets 503, too many connections), yet /healthz and /readyz answer 200;
// once they close, requests are served again.
func testProbesPastConnCap(t *testing.T, httpAddr string) {
	const n = agentd.DefaultHTTPMaxConns
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err == nil && lim.Cur < n+1024 {
		lim.Cur = min(lim.Max, n+1024)
		syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim)
		syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim)
	}
	if lim.Cur < n+1024 {
		t.Skipf("open files limited to %d here; holding %d connections needs %d", lim.Cur, n, n+1024)
	}
	http.DefaultClient.CloseIdleConnections()
	// Each connection sends one probe and stays open, idle: kept alive
	// for --http-idle-timeout (2m), past the header timeout (10s). Those
	// answered past the cap come back closed and hold nothing.
	var mu sync.Mutex
	var conns []net.Conn
	var firstErr error
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	var wg sync.WaitGroup
	work := make(chan struct{})
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range work {
				resp, _, c, err := rawGet(httpAddr, "/healthz")
				mu.Lock()
				switch {
				case err != nil:
					firstErr = cmpErr(firstErr, err)
				case resp.Close:
					c.Close()
				default:
					conns = append(conns, c)
				}
				mu.Unlock()
			}
		}()
	}
	for range n {
		work <- struct{}{}
	}
	close(work)
	wg.Wait()
	if firstErr != nil {
		t.Fatalf("holding %d connections: %v", n, firstErr)
	}
	t.Logf("holding %d idle connections", len(conns))
	if resp, body, c, err := rawGet(httpAddr, "/v1/agents"); err != nil || resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(body, "too many HTTP connections") {
		t.Fatalf("at the cap a request got %v %v %.200s, want 503 too many HTTP connections", resp, err, body)
	} else {
		c.Close()
	}
	for _, probe := range []string{"/healthz", "/readyz"} {
		resp, body, c, err := rawGet(httpAddr, probe)
		if err != nil {
			t.Fatalf("%s at the cap: %v", probe, err)
		}
		c.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("%s at the cap: %s %.200s, want 200", probe, resp.Status, body)
		}
	}
	mu.Lock()
	for _, c := range conns {
		c.Close()
	}
	conns = nil
	mu.Unlock()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) { // not a synchronisation: the interval of a poll on /v1/agents no longer 503
		resp, _, c, err := rawGet(httpAddr, "/v1/agents")
		if err == nil {
			c.Close()
			if resp.StatusCode != http.StatusServiceUnavailable {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("requests still refused after the idle connections closed: %v %v", resp, err)
		}
	}
}

func cmpErr(first, err error) error {
	if first != nil {
		return first
	}
	return err
}
