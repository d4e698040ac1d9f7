package mcptools

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os/exec"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/forever-agents/forever/chat"
)

// Log keys of this package.
const (
	logKeySubsystem = "subsystem"
	logKeyServer    = "mcp_server"
)

// conn is the session with one MCP server. It connects lazily: a call
// that finds no session makes one, unless the last attempts failed and the
// backoff since then has not passed, in which case the call fails at once.
// A session whose transport fails (process exit, EOF, HTTP errors) is
// dropped, by the call that saw the failure or by the watcher goroutine
// that waits on it, and the next call reconnects.
type conn struct {
	srv    Server
	cfg    *Config // shared, read-only
	client *mcp.Client
	logger *slog.Logger
	dial   chan struct{} // a ctx-aware lock held while connecting
	wg     sync.WaitGroup

	mu struct {
		sync.Mutex
		cs       *mcp.ClientSession // nil when not connected
		closed   bool
		ever     bool      // a session was made before
		failures int       // failed connection attempts in a row
		retryAt  time.Time // no attempt before this
		lastErr  error     // why the last attempt failed
	}
}

func newConn(s Server, cfg *Config) *conn {
	logger := cfg.Logger.With(logKeySubsystem, "mcptools", logKeyServer, s.Name)
	return &conn{
		srv:    s,
		cfg:    cfg,
		client: mcp.NewClient(&mcp.Implementation{Name: "forever-agentd", Version: "v1"}, &mcp.ClientOptions{Logger: discardLogger()}),
		logger: logger,
		dial:   make(chan struct{}, 1),
	}
}

// discardLogger returns a logger that drops everything: the SDK's own
// lines (such as a stream it retries) would repeat what this package logs.
func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// start connects and lists the server's tools within cfg.StartTimeout. A
// failure is logged and gives no tools.
func (c *conn) start(ctx context.Context) []*chat.Tool {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.StartTimeout)
	defer cancel()
	tools, err := c.list(ctx)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("no answer within %v: %w", c.cfg.StartTimeout, err)
		}
		c.logger.Warn("mcp server unavailable at startup; agentd runs without its tools",
			"transport", c.srv.transport(), "err", err)
		return nil
	}
	c.logger.Info("mcp server connected", "transport", c.srv.transport(), "tools", len(tools))
	return tools
}

// list connects and lists every page of the server's tools as chat tools.
func (c *conn) list(ctx context.Context) ([]*chat.Tool, error) {
	cs, err := c.session(ctx, false)
	if err != nil {
		return nil, err
	}
	var tools []*chat.Tool
	for t, err := range cs.Tools(ctx, nil) {
		if err != nil {
			c.forget(cs, err)
			return nil, fmt.Errorf("list tools: %w", err)
		}
		ct, err := c.chatTool(t)
		if err != nil {
			c.logger.Warn("mcp tool not offered", "tool", t.Name, "err", err)
			continue
		}
		tools = append(tools, ct)
	}
	return tools, nil
}

// session returns the current session, connecting when there is none.
// With backoff set, a connection attempt is only made once the backoff
// after the last failed one has passed; before that session fails at once
// with an error saying when the next attempt may be made.
func (c *conn) session(ctx context.Context, backoff bool) (*mcp.ClientSession, error) {
	if cs, err := c.current(backoff); cs != nil || err != nil {
		return cs, err
	}
	select {
	case c.dial <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-c.dial }()
	// Another call may have connected, or failed, while this one waited.
	if cs, err := c.current(backoff); cs != nil || err != nil {
		return cs, err
	}
	cctx, cancel := context.WithTimeout(ctx, c.cfg.ConnectTimeout)
	cs, err := c.connect(cctx)
	cancel()
	c.mu.Lock()
	if err != nil {
		if ctx.Err() == nil {
			c.mu.failures++
			c.mu.retryAt = time.Now().Add(c.backoffLocked())
			c.mu.lastErr = err
		}
		c.mu.Unlock()
		return nil, err
	}
	if c.mu.closed {
		c.mu.Unlock()
		cs.Close()
		return nil, ErrClosed
	}
	reconnected := c.mu.ever
	c.mu.cs, c.mu.ever, c.mu.failures, c.mu.retryAt, c.mu.lastErr = cs, true, 0, time.Time{}, nil
	c.wg.Go(func() { c.forget(cs, cs.Wait()) })
	c.mu.Unlock()
	if reconnected {
		c.logger.Info("mcp server reconnected", "transport", c.srv.transport())
	}
	return cs, nil
}

// current returns the session if there is one, or the error to fail with
// now (closed, or in backoff); both nil means a connection may be tried.
func (c *conn) current(backoff bool) (*mcp.ClientSession, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.mu.closed:
		return nil, ErrClosed
	case c.mu.cs != nil:
		return c.mu.cs, nil
	case backoff && c.mu.lastErr != nil && time.Now().Before(c.mu.retryAt):
		return nil, fmt.Errorf("%w (next reconnection attempt in %v)", c.mu.lastErr, time.Until(c.mu.retryAt).Round(time.Millisecond))
	}
	return nil, nil
}

// backoffLocked returns the wait after c.mu.failures failed attempts.
// REQUIRES: c.mu held.
func (c *conn) backoffLocked() time.Duration {
	d := c.cfg.MinBackoff
	for i := 1; i < c.mu.failures && d < c.cfg.MaxBackoff; i++ {
		d *= 2
	}
	return min(d, c.cfg.MaxBackoff)
}

// connect makes a new session: starts the stdio server's process, or opens
// the HTTP session, and runs the MCP handshake.
func (c *conn) connect(ctx context.Context) (*mcp.ClientSession, error) {
	var t mcp.Transport
	if c.srv.URL != "" {
		t = &mcp.StreamableClientTransport{
			Endpoint:   c.srv.URL,
			HTTPClient: c.cfg.HTTPClient,
			// A broken stream fails the session at once; this package
			// reconnects with a new session on the next call.
			MaxRetries: -1,
		}
	} else {
		// Not CommandContext: the process outlives ctx, and conn ends it.
		cmd := exec.Command(c.srv.Command[0], c.srv.Command[1:]...)
		cmd.Stderr = c.cfg.Stderr
		if cmd.Stderr == nil {
			cmd.Stderr = &stderrLogger{logger: c.logger}
		}
		// A child of the server holding stderr open does not hold up Wait.
		cmd.WaitDelay = c.cfg.TerminateTimeout
		t = &mcp.CommandTransport{Command: cmd, TerminateDuration: c.cfg.TerminateTimeout}
	}
	cs, err := c.client.Connect(ctx, t, nil)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	return cs, nil
}

// forget drops cs if it is the current session, after its transport
// failed with err, and closes it in the background (which reaps a stdio
// server's process). Once the conn is closed, close does that instead.
func (c *conn) forget(cs *mcp.ClientSession, err error) {
	c.mu.Lock()
	if c.mu.closed || c.mu.cs != cs {
		c.mu.Unlock()
		return
	}
	c.mu.cs = nil
	c.wg.Go(func() { cs.Close() })
	c.mu.Unlock()
	c.logger.Warn("mcp server connection lost; reconnecting on the next call", "transport", c.srv.transport(), "err", err)
}

// close ends the session and waits for the conn's goroutines.
func (c *conn) close() error {
	c.mu.Lock()
	cs := c.mu.cs
	c.mu.cs, c.mu.closed = nil, true
	c.mu.Unlock()
	var err error
	if cs != nil {
		if cerr := cs.Close(); cerr != nil {
			err = fmt.Errorf("close mcp server %q: %w", c.srv.Name, cerr)
		}
	}
	c.wg.Wait()
	return err
}
