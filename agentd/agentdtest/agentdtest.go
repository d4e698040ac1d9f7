// Package agentdtest has helpers for tests that run an agentd.Daemon in
// process: a config on free ports under a temp dir, a Run that lasts until
// the test ends, and HTTP polling.
package agentdtest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/forever-agents/forever/agentd"
	"github.com/forever-agents/forever/internal/freeport"
)

// Config is a config on free ports with its data under a temp dir, logging
// warnings and errors to the test's output.
func Config(t testing.TB) agentd.Config {
	t.Helper()
	return agentd.Config{
		DataDir:         t.TempDir(),
		HTTPAddr:        "127.0.0.1:0",
		NATSListen:      "127.0.0.1:0",
		ShutdownTimeout: 5 * time.Second,
		Logger:          slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
}

// Start runs d until the test ends and waits for it to start. The returned
// stop cancels Run and returns its error; the cleanup calls it when the
// test did not, and fails the test on an error.
func Start(t testing.TB, d *agentd.Daemon) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	var stopped bool
	var runErr error
	stop = func() error {
		if !stopped {
			stopped = true
			cancel()
			select {
			case runErr = <-done:
			case <-time.After(30 * time.Second):
				t.Fatal("Run did not return 30s after cancel")
			}
		}
		return runErr
	}
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	select {
	case <-d.Started():
	case err := <-done:
		stopped = true
		t.Fatalf("Run returned during start: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("daemon not started after 30s")
	}
	return stop
}

// Get fetches url and returns its status code and body.
func Get(t testing.TB, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return resp.StatusCode, string(b)
}

// WaitStatus polls url until it answers want (for up to 20 s) and returns
// the body.
func WaitStatus(t testing.TB, url string, want int) string {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		code, body := Get(t, url)
		if code == want {
			return body
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s: got %d %s, want %d", url, code, body, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// SyncBuffer is a bytes.Buffer safe for concurrent writers and readers: a
// logger's handler, a child process's output copier, and the test.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns what was written so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// FreeAddr returns a 127.0.0.1 address for a server started later, often
// in another process: its port stays reserved until the test ends, so
// neither another test nor the kernel's :0 hands it out meanwhile
// (internal/freeport).
func FreeAddr(t testing.TB) string {
	t.Helper()
	addr, release, err := freeport.Reserve()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(release)
	return addr
}

// SSEEvent is one Server-Sent Event.
type SSEEvent struct {
	ID   string
	Data string
}

// ReadSSE reads events from r until [DONE], EOF, or max events (0: all).
func ReadSSE(t testing.TB, r io.Reader, max int) []SSEEvent {
	t.Helper()
	var out []SSEEvent
	var cur SSEEvent
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "id: "):
			cur.ID = strings.TrimPrefix(line, "id: ")
		case strings.HasPrefix(line, "data: "):
			cur.Data = strings.TrimPrefix(line, "data: ")
		case line == "" && cur.Data != "":
			out = append(out, cur)
			if cur.Data == "[DONE]" || (max > 0 && len(out) >= max) {
				return out
			}
			cur = SSEEvent{}
		}
	}
	return out
}

// ChunkType decodes an event's chunk type and message id.
func ChunkType(t testing.TB, e SSEEvent) (typ, messageID string) {
	var c struct{ Type, MessageID string }
	if err := json.Unmarshal([]byte(e.Data), &c); err != nil {
		t.Fatalf("event %q: %v", e.Data, err)
	}
	return c.Type, c.MessageID
}

// Post sends body as JSON to url.
func Post(t testing.TB, ctx context.Context, url, body string) *http.Response {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, "POST", url, strings.NewReader(body))
	req.Header.Set("content-type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}
