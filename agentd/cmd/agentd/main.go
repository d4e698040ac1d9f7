// Command agentd runs Forever: durable AI agents on NATS JetStream, with an
// embedded nats-server (or an external one with --nats-url), Pebble
// projections under the data dir, and an HTTP server for /metrics, /healthz
// and /readyz. Run "agentd -h" for the flags; each flag --x-y can also be
// set with the environment variable FOREVER_X_Y.
//
// agentd stops gracefully on SIGINT or SIGTERM and exits 0; it exits 1 with
// a one-line error when it cannot start or fails, and 2 on bad flags.
//
// Its subcommands (agentd help lists them) are one table, commands in
// cli.go: each entry's run returns an error and one function, exitFor,
// turns it into output and the exit code: 0 success (and -h), 1 failure,
// 2 bad usage, 130 interrupted.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/forever-agents/forever/agentd"
	"github.com/forever-agents/forever/agentd/chathost"
	"github.com/forever-agents/forever/agentd/console"
	"github.com/forever-agents/forever/agentd/demo"
	"github.com/forever-agents/forever/agentd/host"
	"github.com/forever-agents/forever/agentd/tenancy"
	"github.com/forever-agents/forever/chat"
	"github.com/forever-agents/forever/chat/llm"
	"github.com/forever-agents/forever/fiber"
	"github.com/forever-agents/forever/mcptools"
	"github.com/forever-agents/forever/modellimit"
	"github.com/forever-agents/forever/tracing/otelenv"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
)

func main() {
	os.Exit(run(os.Args[1:], os.Getenv, os.Stderr))
}

// run is main without the process exit, returning the exit code.
func run(args []string, getenv func(string) string, stderr io.Writer) int {
	if handled, code := runCLI(args, getenv, os.Stdout, stderr); handled {
		return code
	}
	if len(args) > 0 && args[0] != "" && !strings.HasPrefix(args[0], "-") {
		// Not a flag and not one of ours: a mistyped or unknown command.
		fmt.Fprintf(stderr, "agentd: unknown command %q (run 'agentd help' for the commands)\n", args[0])
		return 2
	}
	cfg, err := agentd.ParseFlags(args, getenv)
	if errors.Is(err, flag.ErrHelp) {
		// On stdout, as "agentd help" writes it: the commands, then the
		// daemon's flags.
		writeOverview(os.Stdout)
		fmt.Fprintln(os.Stdout)
		agentd.Usage(os.Stdout)
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}

	restrictUmask()
	opts := &slog.HandlerOptions{Level: cfg.LogLevel}
	var h slog.Handler = slog.NewTextHandler(stderr, opts)
	if cfg.LogFormat == agentd.LogJSON {
		h = slog.NewJSONHandler(stderr, opts)
	}
	cfg.Logger = slog.New(h)
	if v := getenv("FOREVER_NATS_URL"); v != "" && cfg.NATSURL == v && !flagGiven(args, "nats-url") {
		// A variable exported for another shell's daemon turns this one
		// into an external-NATS node: say so where it shows.
		cfg.Logger.Warn("using external NATS from FOREVER_NATS_URL: no embedded server starts (unset the variable for one)", "url", v)
	}

	// Tracing: on when the OTEL_* variables ask for it, off (nil) else.
	tp, shutdownTracing, err := otelenv.Setup(context.Background(), otelenv.Config{
		Attributes: []attribute.KeyValue{attribute.String("service.instance.id", cfg.ServerName)},
		Getenv:     getenv,
	})
	if err != nil {
		var ce *otelenv.ConfigError
		if errors.As(err, &ce) {
			fmt.Fprintf(stderr, "agentd: tracing: %s\n", ce.Message)
		} else {
			fmt.Fprintf(stderr, "agentd: tracing: %v\n", err)
		}
		return 2
	}
	cfg.TracerProvider = tp
	logTracing(cfg.Logger, getenv)
	defer func() {
		// The spans not yet exported go out before the process exits.
		ctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
		defer cancel()
		if err := shutdownTracing(ctx); err != nil {
			cfg.Logger.Warn("flush traces", "err", err)
		}
	}()

	// With auth (--auth, or implied by a non-loopback listen), each tenant
	// gets the agent types in its own daemon; else the daemon runs them.
	d, err := agentd.New(cfg)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	var mcpc *mcptools.Client
	if cfg.Auth {
		mcpc, err = wireTenants(d)
	} else {
		mcpc, err = wire(d)
	}
	if mcpc != nil {
		// After Run: the chat agents use the MCP tools until they stop.
		defer func() {
			if err := mcpc.Close(); err != nil {
				cfg.Logger.Warn("close mcp servers", "err", err)
			}
		}()
	}
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	// After the first signal, a second one kills the process at once.
	context.AfterFunc(ctx, stop)
	// SIGHUP reloads the TLS certificate and key.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	go func() {
		for range hup {
			_ = d.ReloadTLS() // logged
		}
	}()
	if err := d.Run(ctx); err != nil {
		// One line, also when shutdown errors were joined to the cause.
		fmt.Fprintln(stderr, strings.ReplaceAll(err.Error(), "\n", "; "))
		return 1
	}
	return 0
}

// wireTenants serves tenants from d (package tenancy), wiring the built-in
// agent types into each tenant's daemon, with the demo tools writing under
// the tenant's data dir and the --mcp servers' tools shared by all
// tenants.
func wireTenants(d *agentd.Daemon) (*mcptools.Client, error) {
	provider, err := newProvider(d.Config())
	if err != nil {
		return nil, err
	}
	mcpc, err := connectMCP(d.Config())
	if err != nil {
		return mcpc, err
	}
	// --max-turns bounds the node's turns across its tenants.
	nodeTurns := chat.NewTurnLimiter(d.Config().MaxTurns)
	running := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "forever_chat_node_turns_running",
		Help: "Chat turns running on this node across its tenants (--max-turns bounds new ones).",
	}, func() float64 { return float64(nodeTurns.Running()) })
	if err := d.Config().Registerer.Register(running); err != nil {
		return mcpc, err
	}
	// --model-limit is shared by the node's tenants by their weights.
	lim, err := newModelLimiter(d.Config())
	if err != nil {
		return mcpc, err
	}
	d.Handle("GET /console", console.Handler())
	return mcpc, tenancy.Attach(d, func(d *agentd.Daemon) error {
		tools, err := builtinTools(d.Config().DataDir)
		if err == nil {
			tools, err = addTools(tools, mcpc)
		}
		if err != nil {
			return err
		}
		return wireAgents(d, provider, tools, nodeTurns, lim)
	})
}

// wire registers the built-in agent types on a host attached to d: steps,
// and chat, which takes every agent id no other type claims. Chat agents
// get the demo tools and the tools of the --mcp servers; wire returns the
// MCP client (nil without --mcp) for the caller to close after Run, also
// when wire fails.
func wire(d *agentd.Daemon) (*mcptools.Client, error) {
	provider, err := newProvider(d.Config())
	if err != nil {
		return nil, err
	}
	tools, err := builtinTools(d.Config().DataDir)
	if err != nil {
		return nil, err
	}
	mcpc, err := connectMCP(d.Config())
	if err == nil {
		tools, err = addTools(tools, mcpc)
	}
	if err != nil {
		return mcpc, err
	}
	lim, err := newModelLimiter(d.Config())
	if err != nil {
		return mcpc, err
	}
	d.Handle("GET /console", console.Handler())
	return mcpc, wireAgents(d, provider, tools, nil, lim)
}

// newModelLimiter builds the node's model limiter of --model-limit and
// --model-token-limit (package modellimit): the chat types of its tenants
// share it. Without bounds it still pauses every tenant's calls when the
// provider answers 429.
func newModelLimiter(cfg agentd.Config) (*modellimit.Limiter, error) {
	lim, err := modellimit.New(modellimit.Config{
		Calls: cfg.ModelLimit, Tokens: cfg.ModelTokenLimit,
		Logger: cfg.Logger, Registerer: cfg.Registerer,
	})
	if err != nil {
		return nil, agentd.ConfigErrorf("model-limit", "%s", strings.TrimPrefix(err.Error(), "modellimit: "))
	}
	return lim, nil
}

// connectMCP connects to the --mcp servers (nil without). A server that
// does not answer within mcptools.DefaultStartTimeout is left out with a
// warning; agentd starts without its tools. The stdio servers' stderr is
// logged line by line.
func connectMCP(cfg agentd.Config) (*mcptools.Client, error) {
	servers, err := cfg.MCPServers()
	if err != nil || len(servers) == 0 {
		return nil, err
	}
	return mcptools.Connect(context.Background(), mcptools.Config{
		Servers: servers, Logger: cfg.Logger,
	})
}

// builtinTools are the tools every chat agent of agentd has: the demo
// tools (clock, note, writing into dataDir) and the agent tool, whose
// calls run other agents' turns (sub-agents).
func builtinTools(dataDir string) (*chat.Tools, error) {
	tools, err := demo.Tools(dataDir)
	if err != nil {
		return nil, err
	}
	agent, err := chat.AgentTool()
	if err != nil {
		return nil, err
	}
	return withTools(tools, agent)
}

// addTools returns tools with mcpc's tools added (tools itself without
// MCP servers).
func addTools(tools *chat.Tools, mcpc *mcptools.Client) (*chat.Tools, error) {
	if mcpc == nil {
		return tools, nil
	}
	return withTools(tools, mcpc.Tools()...)
}

// withTools returns a registry of tools' tools and more.
func withTools(tools *chat.Tools, more ...*chat.Tool) (*chat.Tools, error) {
	var all []*chat.Tool
	for _, def := range tools.Defs() {
		t, _ := tools.Lookup(def.Name)
		all = append(all, t)
	}
	return chat.NewTools(append(all, more...)...)
}

// wireAgents registers the agent types, chat with tools; nodeTurns, when
// set, is the node's turn limiter the tenants' chat types share.
func wireAgents(d *agentd.Daemon, provider llm.Provider, tools *chat.Tools, nodeTurns *chat.TurnLimiter, lim *modellimit.Limiter) error {
	chats := chathost.NewType(provider, func(c *chat.Config) { c.Tools = tools })
	if nodeTurns != nil {
		chats.ShareTurns(nodeTurns)
	}
	chats.ShareModelLimiter(lim)
	if err := chats.Attach(d); err != nil {
		return err
	}
	h := host.New(host.Config{DefaultType: "chat"})
	tv := host.TypeVersion{Version: d.Config().AgentVersion, Policy: fiber.VersionPolicy(d.Config().VersionPolicy)}
	if err := h.RegisterType(host.TypeSpec{Name: "steps", Factory: demo.NewStepsAgent, Verbs: demo.StepsVerbs, Version: &tv}); err != nil {
		return err
	}
	forking := chats.Forking()
	if err := h.RegisterType(host.TypeSpec{
		Name: "chat", Factory: chats.Factory,
		Verbs: chathost.Verbs, Internal: chathost.InternalVerbs,
		StatusDetail: chats.StatusDetail,
		OnDelete:     chats.OnDelete(h.Command),
		Forking:      &forking,
		Version:      &tv,
	}); err != nil {
		return err
	}
	if err := h.Attach(d); err != nil {
		return err
	}
	if err := chathost.AttachRetention(d, h, chats); err != nil {
		return err
	}
	if err := host.AttachHTTP(d, h, host.HTTPConfig{State: chats}); err != nil {
		return err
	}
	if err := chathost.AttachReads(d, h); err != nil {
		return err
	}
	return chathost.AttachGateway(d, h, chats)
}

// flagGiven reports whether args set the flag name on the command line
// (-name, --name, with or without =value).
func flagGiven(args []string, name string) bool {
	for _, a := range args {
		if a == "--" {
			return false
		}
		a = strings.TrimLeft(a, "-")
		if a == name || strings.HasPrefix(a, name+"=") {
			return true
		}
	}
	return false
}

// logTracing says at start, in one line, whether tracing is on (INFO) or
// off (DEBUG) and where its spans go: each exporter with its protocol and endpoint (no
// headers, no credentials of the URL).
func logTracing(logger *slog.Logger, getenv func(string) string) {
	exports, err := otelenv.Describe(getenv)
	if err != nil {
		return // otelenv.Setup refused the same variables first
	}
	if len(exports) == 0 {
		// At debug: a daemon that fails at start (a port in use) says
		// only why, and the default needs no line.
		logger.Debug("tracing is off (set OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_TRACES_EXPORTER to turn it on)")
		return
	}
	var names, protos, endpoints []string
	for _, e := range exports {
		names, endpoints = append(names, e.Exporter), append(endpoints, e.Endpoint)
		if e.Protocol != "" {
			protos = append(protos, e.Protocol)
		}
	}
	attrs := []any{"exporter", strings.Join(names, ","), "endpoint", strings.Join(endpoints, ",")}
	if len(protos) > 0 {
		attrs = append(attrs, "protocol", strings.Join(protos, ","))
	}
	logger.Info("tracing is on", attrs...)
}
