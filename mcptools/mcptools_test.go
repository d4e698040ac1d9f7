package mcptools

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/forever-agents/forever/chat"
	"github.com/forever-agents/forever/internal/freeport"
	"github.com/forever-agents/forever/internal/waitfor"
)

// serverBin is the test MCP server (testdata/mcpserver), built once by
// TestMain.
var serverBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "mcptools-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	serverBin = filepath.Join(dir, "mcpserver")
	out, err := exec.Command("go", "build", "-o", serverBin, "./testdata/mcpserver").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "go build ./testdata/mcpserver: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// logBuffer collects log lines for the test to read.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// testConfig is a Config with short backoffs and a logger into logs.
func testConfig(logs *logBuffer, servers ...Server) Config {
	return Config{
		Servers:          servers,
		Logger:           slog.New(slog.NewTextHandler(logs, nil)),
		MinBackoff:       10 * time.Millisecond,
		MaxBackoff:       100 * time.Millisecond,
		TerminateTimeout: time.Second,
		Stderr:           logs,
	}
}

func connect(t *testing.T, cfg Config) *Client {
	t.Helper()
	c, err := Connect(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// stdioServer is the test server over stdio, recording into record, with
// one tool per page of tools/list.
func stdioServer(name, record string) Server {
	return Server{Name: name, Command: []string{serverBin, "-record", record, "-page-size", "1"}}
}

// httpProc is the test server over streamable HTTP, as a process.
type httpProc struct {
	cmd  *exec.Cmd
	addr string
	done chan struct{}
}

// startHTTP runs the test server on addr ("127.0.0.1:0" picks a port) and
// waits until it listens.
func startHTTP(t *testing.T, addr, record string) *httpProc {
	t.Helper()
	cmd := exec.Command(serverBin, "-http", addr, "-record", record, "-page-size", "1")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &httpProc{cmd: cmd, done: make(chan struct{})}
	go func() { cmd.Wait(); close(p.done) }()
	t.Cleanup(p.kill)
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("test server did not start: %v", err)
	}
	p.addr = strings.TrimSpace(strings.TrimPrefix(line, "listening "))
	return p
}

func (p *httpProc) kill() {
	p.cmd.Process.Kill()
	<-p.done
}

func (p *httpProc) url() string { return "http://" + p.addr + "/" }

// callTool calls the chat tool name of c as chat would, with key as the
// call's idempotency key.
func callTool(t *testing.T, c *Client, name, key, input string) (json.RawMessage, error) {
	t.Helper()
	i := slices.IndexFunc(c.Tools(), func(ct *chat.Tool) bool { return ct.Name() == name })
	if i < 0 {
		t.Fatalf("no tool %q", name)
	}
	server, tool, _ := strings.Cut(name, ToolSeparator)
	for _, cn := range c.conns {
		if cn.srv.Name == server {
			return cn.call(t.Context(), tool, c.Tools()[i].Safety(), key, json.RawMessage(input))
		}
	}
	t.Fatalf("no server %q", server)
	return nil, nil
}

// toolError returns err as a *chat.ToolError, failing the test otherwise.
func toolError(t *testing.T, err error) *chat.ToolError {
	t.Helper()
	var te *chat.ToolError
	if !errors.As(err, &te) {
		t.Fatalf("got error %v (%T), want a *chat.ToolError", err, err)
	}
	return te
}

// records returns the lines of the record file that start with kind.
func records(t *testing.T, record, kind string) []string {
	t.Helper()
	b, err := os.ReadFile(record)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var got []string
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), kind+" "); ok {
			got = append(got, rest)
		}
	}
	return got
}

// waitRecord waits for the n-th line of kind in the record file and
// returns it.
func waitRecord(t *testing.T, record, kind string, n int) string {
	t.Helper()
	var got []string
	waitfor.True(t, fmt.Sprintf("%d %q records", n, kind), func() bool {
		got = records(t, record, kind)
		return len(got) >= n
	})
	return got[n-1]
}

func TestParseServer(t *testing.T) {
	valid := []struct {
		spec string
		want Server
	}{
		{"fs=mcp-fs --root /tmp", Server{Name: "fs", Command: []string{"mcp-fs", "--root", "/tmp"}}},
		{"a_b-1=  srv\t-x  ", Server{Name: "a_b-1", Command: []string{"srv", "-x"}}},
		{"web=https://example.com/mcp", Server{Name: "web", URL: "https://example.com/mcp"}},
		{"local=http://127.0.0.1:8000/mcp", Server{Name: "local", URL: "http://127.0.0.1:8000/mcp"}},
	}
	for _, tc := range valid {
		t.Run(tc.spec, func(t *testing.T) {
			got, err := ParseServer(tc.spec)
			if err != nil {
				t.Fatal(err)
			}
			if got.Name != tc.want.Name || got.URL != tc.want.URL || !slices.Equal(got.Command, tc.want.Command) {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
	invalid := []struct{ spec, want string }{
		{"srv", "not name=command"},
		{"=cmd", "no server name"},
		{"a b=cmd", "only letters"},
		{"a.b=cmd", "only letters"},
		{"a__b=cmd", `must not contain "__"`},
		{"srv=", "no command"},
		{"srv=   ", "no command"},
		{"srv=http://", "with a host"},
	}
	for _, tc := range invalid {
		t.Run(tc.spec, func(t *testing.T) {
			_, err := ParseServer(tc.spec)
			if !errors.Is(err, ErrInvalidServer) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want ErrInvalidServer saying %q", err, tc.want)
			}
		})
	}
}

func TestConfigValidate(t *testing.T) {
	cfg := Config{Servers: []Server{{Name: "a", Command: []string{"x"}}, {Name: "a", URL: "http://h/"}}}
	if err := cfg.Validate(); !errors.Is(err, ErrInvalidServer) {
		t.Errorf("two servers named a: got %v, want ErrInvalidServer", err)
	}
	cfg = Config{MinBackoff: time.Second, MaxBackoff: time.Millisecond}
	if err := cfg.Validate(); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("MaxBackoff below MinBackoff: got %v, want ErrInvalidConfig", err)
	}
}

func TestStdio(t *testing.T) {
	record := filepath.Join(t.TempDir(), "record")
	testServer(t, stdioServer("t", record), record)
}

func TestHTTP(t *testing.T) {
	record := filepath.Join(t.TempDir(), "record")
	p := startHTTP(t, "127.0.0.1:0", record)
	testServer(t, Server{Name: "t", URL: p.url()}, record)
}

// testServer lists the test server's tools (across pages) and calls them.
func testServer(t *testing.T, srv Server, record string) {
	var logs logBuffer
	c := connect(t, testConfig(&logs, srv))
	got := map[string]chat.Safety{}
	for _, ct := range c.Tools() {
		got[ct.Name()] = ct.Safety()
	}
	want := map[string]chat.Safety{
		"t__echo": chat.Idempotent, "t__fail": chat.Idempotent,
		"t__record": chat.Unsafe, "t__hang": chat.Unsafe,
	}
	if len(got) != len(want) {
		t.Fatalf("tools %v, want %v\n%s", got, want, logs.String())
	}
	for name, s := range want {
		if g, ok := got[name]; !ok || g != s {
			t.Errorf("tool %s: safety %v (offered: %v), want %v", name, g, ok, s)
		}
	}
	for _, ct := range c.Tools() {
		if ct.Name() != "t__echo" {
			continue
		}
		def := ct.Def()
		if def.Description != "Echoes its text." {
			t.Errorf("echo description %q", def.Description)
		}
		var schema struct {
			Type       string
			Properties map[string]any
		}
		if err := json.Unmarshal(def.Schema, &schema); err != nil || schema.Type != "object" || schema.Properties["text"] == nil {
			t.Errorf("echo schema %s (%v), want the server's object schema with text", def.Schema, err)
		}
	}

	t.Run("echo", func(t *testing.T) {
		out, err := callTool(t, c, "t__echo", "k-echo", `{"text":"hi there"}`)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := string(out), `"hi there"`; got != want {
			t.Errorf("echo output %s, want %s", got, want)
		}
	})
	t.Run("idempotency key in _meta", func(t *testing.T) {
		const key = "0123456789abcdef0123456789abcdef"
		out, err := callTool(t, c, "t__record", key, `{}`)
		if err != nil {
			t.Fatal(err)
		}
		var res struct {
			Key string `json:"key"`
			PID int    `json:"pid"`
		}
		if err := json.Unmarshal(out, &res); err != nil || res.Key != key || res.PID == 0 {
			t.Errorf("record output %s (%v), want the structured content with key %s", out, err, key)
		}
		if got := records(t, record, "record"); !slices.Equal(got, []string{key}) {
			t.Errorf("the server recorded keys %q, want [%s]", got, key)
		}
	})
	t.Run("isError", func(t *testing.T) {
		_, err := callTool(t, c, "t__fail", "k-fail", `{"text":"x"}`)
		te := toolError(t, err)
		if te.Type != ErrorTypeTool || !strings.Contains(te.Message, "boom: x") || te.Retryable {
			t.Errorf("got %+v, want a final mcp_error with the server's text", te)
		}
	})
	t.Run("unknown tool", func(t *testing.T) {
		_, err := c.conns[0].call(t.Context(), "nosuch", chat.Unsafe, "", json.RawMessage(`{}`))
		if te := toolError(t, err); te.Type != ErrorTypeTool {
			t.Errorf("got %+v, want mcp_error", te)
		}
	})
}

func TestStdioKilledMidCall(t *testing.T) {
	record := filepath.Join(t.TempDir(), "record")
	var logs logBuffer
	c := connect(t, testConfig(&logs, stdioServer("t", record)))

	errc := make(chan error, 1)
	go func() {
		_, err := callTool(t, c, "t__hang", "k-hang", `{}`)
		errc <- err
	}()
	pid, _ := strconv.Atoi(waitRecord(t, record, "hang", 1))
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	te := toolError(t, <-errc)
	t.Logf("the model sees: %v", te)
	if te.Type != ErrorTypeUnavailable || !strings.Contains(te.Message, `MCP server "t"`) || te.Retryable {
		t.Errorf("got %+v, want a final mcp_unavailable naming the server", te)
	}
	if !strings.Contains(te.Message, "unknown") {
		t.Errorf("message %q does not say the outcome of the unsafe call is unknown", te.Message)
	}

	// The next call starts the server again.
	out, err := callTool(t, c, "t__echo", "k-echo", `{"text":"back"}`)
	if err != nil {
		t.Fatalf("call after the crash: %v\n%s", err, logs.String())
	}
	if string(out) != `"back"` {
		t.Errorf("echo output %s", out)
	}
	if starts := records(t, record, "start"); len(starts) != 2 || starts[1] == strconv.Itoa(pid) {
		t.Errorf("server starts %q, want a second process", starts)
	}
}

func TestStdioExitWhileIdle(t *testing.T) {
	record := filepath.Join(t.TempDir(), "record")
	var logs logBuffer
	c := connect(t, testConfig(&logs, stdioServer("t", record)))
	pid, _ := strconv.Atoi(waitRecord(t, record, "start", 1))
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// The watcher drops the session once the process is gone.
	cn := c.conns[0]
	waitfor.True(t, "the session of the killed server to be dropped", func() bool {
		cn.mu.Lock()
		defer cn.mu.Unlock()
		return cn.mu.cs == nil
	})
	if _, err := callTool(t, c, "t__echo", "k", `{"text":"x"}`); err != nil {
		t.Fatalf("first call after the server exited: %v", err)
	}
}

func TestHTTPKilledMidCall(t *testing.T) {
	record := filepath.Join(t.TempDir(), "record")
	p := startHTTP(t, "127.0.0.1:0", record)
	var logs logBuffer
	c := connect(t, testConfig(&logs, Server{Name: "web", URL: p.url()}))

	errc := make(chan error, 1)
	go func() {
		_, err := callTool(t, c, "web__hang", "k-hang", `{}`)
		errc <- err
	}()
	waitRecord(t, record, "hang", 1)
	p.kill()
	te := toolError(t, <-errc)
	t.Logf("the model sees: %v", te)
	if te.Type != ErrorTypeUnavailable || !strings.Contains(te.Message, `MCP server "web"`) {
		t.Errorf("got %+v, want mcp_unavailable naming the server", te)
	}

	// While it is down, calls fail at once with the same type.
	_, err := callTool(t, c, "web__echo", "k-down", `{"text":"x"}`)
	t.Logf("while down the model sees: %v", err)
	if te := toolError(t, err); te.Type != ErrorTypeUnavailable || !strings.Contains(te.Message, `MCP server "web"`) || !te.Retryable {
		t.Errorf("call while down: got %+v, want a retryable mcp_unavailable", te)
	}

	// Back on the same address, a later call reconnects (after the backoff).
	startHTTP(t, p.addr, record)
	waitfor.NoError(t, func() error {
		out, err := callTool(t, c, "web__echo", "k-back", `{"text":"back"}`)
		if err == nil {
			if string(out) != `"back"` {
				t.Errorf("echo output %s", out)
			}
			return nil
		}
		if te := toolError(t, err); te.Type != ErrorTypeUnavailable {
			t.Fatalf("call after restart: %+v", te)
		}
		return fmt.Errorf("a reconnection: %v\n%s", err, logs.String())
	})
}

func TestUnavailableAtStart(t *testing.T) {
	addr, release, err := freeport.Reserve()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(release)
	closed := "http://" + addr + "/mcp"
	record := filepath.Join(t.TempDir(), "record")
	var logs logBuffer
	c := connect(t, testConfig(&logs,
		Server{Name: "gone", URL: closed},
		Server{Name: "nocmd", Command: []string{filepath.Join(t.TempDir(), "no-such-server")}},
		stdioServer("ok", record),
	))
	var names []string
	for _, ct := range c.Tools() {
		names = append(names, ct.Name())
	}
	slices.Sort(names)
	if want := []string{"ok__echo", "ok__fail", "ok__hang", "ok__record"}; !slices.Equal(names, want) {
		t.Errorf("tools %v, want only the reachable server's %v", names, want)
	}
	for _, name := range []string{"gone", "nocmd"} {
		if !strings.Contains(logs.String(), "mcp_server="+name) || !strings.Contains(logs.String(), "unavailable at startup") {
			t.Errorf("no startup warning for %s in the log:\n%s", name, logs.String())
		}
	}
}

func TestClose(t *testing.T) {
	record := filepath.Join(t.TempDir(), "record")
	var logs logBuffer
	c, err := Connect(t.Context(), testConfig(&logs, stdioServer("t", record)))
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(waitRecord(t, record, "start", 1))
	if err := c.Close(); err != nil {
		t.Errorf("close: %v", err)
	}
	// Close waited for the process, which closing stdin ended.
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("server process %d after Close: %v, want it gone", pid, err)
	}
	_, err = callTool(t, c, "t__echo", "k", `{"text":"x"}`)
	if te := toolError(t, err); te.Type != ErrorTypeUnavailable {
		t.Errorf("call after Close: %+v, want mcp_unavailable", te)
	}
	if err := c.Close(); err != nil {
		t.Errorf("second close: %v", err)
	}
}

func TestConnectCanceled(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	var logs logBuffer
	if _, err := Connect(ctx, testConfig(&logs, Server{Name: "t", Command: []string{serverBin}})); !errors.Is(err, context.Canceled) {
		t.Errorf("got %v, want context.Canceled", err)
	}
}
