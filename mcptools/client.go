package mcptools

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/forever-agents/forever/chat"
)

// Defaults for Config fields left zero.
const (
	// DefaultStartTimeout bounds connecting to one server and listing its
	// tools in Connect.
	DefaultStartTimeout = 10 * time.Second
	// DefaultConnectTimeout bounds one reconnection attempt made by a call.
	DefaultConnectTimeout = 10 * time.Second
	// DefaultMinBackoff is the wait after the first failed reconnection
	// before a call tries again; it doubles with each further failure.
	DefaultMinBackoff = 250 * time.Millisecond
	// DefaultMaxBackoff caps the wait between reconnection attempts.
	DefaultMaxBackoff = 30 * time.Second
	// DefaultTerminateTimeout is how long closing a stdio server waits for it
	// to exit after its stdin is closed, before SIGTERM (and as long again
	// before SIGKILL).
	DefaultTerminateTimeout = 2 * time.Second
)

// Config configures Connect. A zero field means its default.
type Config struct {
	// Servers are the MCP servers whose tools are offered. Their names must
	// be unique.
	Servers []Server
	// Logger receives warnings about servers that are unavailable or lost,
	// and tools that cannot be offered. Default slog.Default().
	Logger *slog.Logger
	// StartTimeout bounds connecting to one server and listing its tools in
	// Connect (servers are connected in parallel). Default
	// DefaultStartTimeout.
	StartTimeout time.Duration
	// ConnectTimeout bounds one reconnection attempt made by a call (the
	// call's own timeout bounds it too). Default DefaultConnectTimeout.
	ConnectTimeout time.Duration
	// MinBackoff and MaxBackoff bound the wait between reconnection
	// attempts: after n failed attempts in a row a call fails at once,
	// without trying, until MinBackoff*2^(n-1) (at most MaxBackoff) has
	// passed. Defaults DefaultMinBackoff and DefaultMaxBackoff.
	MinBackoff, MaxBackoff time.Duration
	// TerminateTimeout is how long closing a stdio server waits for it to
	// exit after its stdin is closed before signalling it. Default
	// DefaultTerminateTimeout.
	TerminateTimeout time.Duration
	// ToolTimeout bounds each call of an MCP tool (chat.WithTimeout). Zero
	// means chat.DefaultToolTimeout.
	ToolTimeout time.Duration
	// Stderr receives the standard error of stdio servers. Nil logs each
	// line through Logger (info level, message "mcp server stderr", the
	// server's name under "mcp_server").
	Stderr io.Writer
	// HTTPClient makes the requests to HTTP servers. Nil means
	// http.DefaultClient.
	HTTPClient *http.Client
}

// setDefaults fills the zero fields with their defaults.
func (c *Config) setDefaults() {
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.StartTimeout == 0 {
		c.StartTimeout = DefaultStartTimeout
	}
	if c.ConnectTimeout == 0 {
		c.ConnectTimeout = DefaultConnectTimeout
	}
	if c.MinBackoff == 0 {
		c.MinBackoff = DefaultMinBackoff
	}
	if c.MaxBackoff == 0 {
		c.MaxBackoff = DefaultMaxBackoff
	}
	if c.TerminateTimeout == 0 {
		c.TerminateTimeout = DefaultTerminateTimeout
	}
}

// Validate checks every server and that their names are unique, and that
// no duration is negative. Errors wrap ErrInvalidServer (a bad server) or
// ErrInvalidConfig.
func (c *Config) Validate() error {
	seen := make(map[string]bool, len(c.Servers))
	for _, s := range c.Servers {
		if err := s.Validate(); err != nil {
			return err
		}
		if seen[s.Name] {
			return fmt.Errorf("%w: server name %q is used twice", ErrInvalidServer, s.Name)
		}
		seen[s.Name] = true
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"StartTimeout", c.StartTimeout}, {"ConnectTimeout", c.ConnectTimeout},
		{"MinBackoff", c.MinBackoff}, {"MaxBackoff", c.MaxBackoff},
		{"TerminateTimeout", c.TerminateTimeout}, {"ToolTimeout", c.ToolTimeout},
	} {
		if d.v < 0 {
			return fmt.Errorf("%w: negative %s %v", ErrInvalidConfig, d.name, d.v)
		}
	}
	if c.MaxBackoff != 0 && c.MaxBackoff < c.MinBackoff {
		return fmt.Errorf("%w: MaxBackoff %v below MinBackoff %v", ErrInvalidConfig, c.MaxBackoff, c.MinBackoff)
	}
	return nil
}

// ErrInvalidConfig is returned (wrapped) by Config.Validate and Connect for
// a Config that is not a bad server but still cannot be used.
var ErrInvalidConfig = errors.New("mcptools: invalid config")

// ErrClosed is the cause of a call made after Client.Close (the model sees
// a ToolError "mcp_unavailable").
var ErrClosed = errors.New("mcptools: client closed")

// Client holds the sessions with a set of MCP servers and the chat tools
// that call them. Make one with Connect; Close it on shutdown to end the
// sessions and the stdio servers' processes. A Client is safe for
// concurrent use.
type Client struct {
	conns []*conn
	tools []*chat.Tool
}

// Connect connects to every server of cfg in parallel, lists its tools
// (every page) and makes one chat tool per MCP tool, named
// "<server>__<tool>" (see the package doc for how they behave).
//
// A server that cannot be reached, or whose tools cannot be listed, within
// cfg.StartTimeout is left out: Connect logs a warning naming it and goes
// on, and that server's tools are not offered for the life of the Client.
// A tool that cannot be offered (a name that, prefixed, is not a valid chat
// tool name or is taken; an input schema that is not an object schema) is
// left out with a warning too.
//
// Connect fails only for a cfg that does not validate (errors wrap
// ErrInvalidServer or ErrInvalidConfig) or when ctx ends. The caller must
// Close the Client it returns.
func Connect(ctx context.Context, cfg Config) (*Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	c := &Client{conns: make([]*conn, len(cfg.Servers))}
	for i, s := range cfg.Servers {
		c.conns[i] = newConn(s, &cfg)
	}
	perServer := make([][]*chat.Tool, len(c.conns))
	var wg sync.WaitGroup
	for i, cn := range c.conns {
		wg.Go(func() { perServer[i] = cn.start(ctx) })
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		c.Close()
		return nil, err
	}
	taken := make(map[string]bool)
	for i, tools := range perServer {
		for _, t := range tools {
			if taken[t.Name()] {
				c.conns[i].logger.Warn("mcp tool not offered: its name is taken by another server's tool", "tool", t.Name())
				continue
			}
			taken[t.Name()] = true
			c.tools = append(c.tools, t)
		}
	}
	return c, nil
}

// Tools returns the chat tools of the servers that answered in Connect, in
// the servers' order and each server's listing order. The caller owns the
// slice; the tools are safe for concurrent use and stay usable (failing
// with "mcp_unavailable") after Close.
func (c *Client) Tools() []*chat.Tool {
	return append([]*chat.Tool(nil), c.tools...)
}

// Close ends every session, closing the stdio servers' stdin and waiting
// for them to exit (signalling them after cfg.TerminateTimeout), and waits
// for the Client's goroutines. Calls after Close fail with a ToolError
// "mcp_unavailable". Close is idempotent; it returns the errors of closing
// the sessions, joined.
func (c *Client) Close() error {
	errs := make([]error, len(c.conns))
	var wg sync.WaitGroup
	for i, cn := range c.conns {
		wg.Go(func() { errs[i] = cn.close() })
	}
	wg.Wait()
	return errors.Join(errs...)
}
