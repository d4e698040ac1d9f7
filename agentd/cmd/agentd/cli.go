package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/forever-agents/forever/agentd"
	"github.com/forever-agents/forever/agentd/chathost"
	"github.com/forever-agents/forever/agentd/host"
	"github.com/forever-agents/forever/auth"
	"github.com/forever-agents/forever/blob"
	"github.com/forever-agents/forever/chat"
	"github.com/forever-agents/forever/chat/chunk"
	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/internal/apierror"
	"github.com/forever-agents/forever/replay"
)

// CLI exit codes.
const (
	exitOK          = 0
	exitFailed      = 1
	exitUsage       = 2
	exitInterrupted = 130
)

// cliRequestTimeout bounds one command request to agentd.
const cliRequestTimeout = 30 * time.Second

// defaultWait is --wait's default: how long chat and tail wait for a lost
// connection to agentd to come back before they give up.
const defaultWait = 5 * time.Minute

// Connection settings of the client commands: a lost server is noticed
// within about a second (pings every 500 ms, two unanswered), and the
// client reconnects every 250 ms until it is back or --wait runs out.
const (
	cliPingInterval   = 500 * time.Millisecond
	cliPingsMissed    = 2
	cliReconnectWait  = 250 * time.Millisecond
	cliConnectTimeout = 2 * time.Second
)

// command is one subcommand of agentd: what help lists of it and what
// runs it.
type command struct {
	name, args, summary string
	usage               string // its detailed usage (agentd help <name>)
	// flags returns the flag set the command parses (the defaults as
	// getenv makes them), for help to list; nil for none.
	flags func(getenv func(string) string) *flag.FlagSet
	// run runs the command on the arguments after its name; exitFor
	// turns what it returns into output and the exit code. Nil for help,
	// which runs from this table (runHelp).
	run func(ctx context.Context, in invocation, args []string) error
}

// invocation is what a command runs with: the name it was called by
// (commands that share a run tell theirs apart by it), the environment
// and its output.
type invocation struct {
	cmd            string
	getenv         func(string) string
	stdout, stderr io.Writer
}

// commands are agentd's subcommands, in the order help lists them.
var commands = []command{
	{"chat", `<agent> "text"`, "send a message and print the reply as it streams", cliUsage, flagsOf(clientCmdFlagSet, "chat"), clientCommand},
	{"tail", "<agent> [--from cursor]", "follow the agent's latest stream, from a cursor", cliUsage, flagsOf(clientCmdFlagSet, "tail"), clientCommand},
	{"status", "<agent>", "show the agent's status and its calls waiting for approval", cliUsage, flagsOf(clientCmdFlagSet, "status"), clientCommand},
	{"fibers", "<agent>", "list the agent's running fibers", cliUsage, flagsOf(clientCmdFlagSet, "fibers"), clientCommand},
	{"tools", "<agent>", "list the agent's tools: safety, approval and source", cliUsage, flagsOf(clientCmdFlagSet, "tools"), clientCommand},
	{"approve", "<agent> <toolCallId>", "approve a waiting tool call and print the resumed reply", cliUsage, flagsOf(clientCmdFlagSet, "approve"), clientCommand},
	{"deny", "<agent> <toolCallId>", "deny a waiting tool call; the model is told", cliUsage, flagsOf(clientCmdFlagSet, "deny"), clientCommand},
	{"budget", "<agent> [--tokens n] [--cost x] [--period 24h]", "show or set the agent's token and cost budget", budgetUsage, flagsOf(budgetFlagSet, "budget"), budgetCommand},
	{"agents", "[--user u] [--tag t] [--type x]", "list the agents", agentsUsage, flagsOf(agentsFlagSet, "agents"), agentsCommand},
	{"delete", "<agent>", "delete an agent and its history (admin)", agentsUsage, flagsOf(agentsFlagSet, "delete"), agentsCommand},
	{"fork", "<agent> --to <new> [--at <message id>]", "fork an agent's conversation into a new agent", forkUsage, flagsOf(forkFlagSet, "fork"), forkCommand},
	{"cluster", "[--json]", "show the nodes, partitions, record format and streams", agentsUsage, flagsOf(agentsFlagSet, "cluster"), agentsCommand},
	{"verify", "[--data dir]", "check the log's invariants", verifyUsage, flagsOf(verifyFlagSet, "verify"), verifyCommand},
	{"replay", "<agent> [--turn <requestId>] [--data dir]", "replay recorded turns through this binary's agent code", replayUsage, flagsOf(replayFlagSet, "replay"), replayCommand},
	{"tenant", "create|revoke|disable|enable|move|token ...", "manage the tenants of an agentd with --auth", tenantUsage, flagsOf(tenantFlagSet, "tenant"), tenantCommand},
	{"auth", "server-config|admin-creds|admin-token ...", "print an external nats-server's config, an admin credential, or an admin HTTP token", authUsage, flagsOf(authFlagSet, "auth"), authCommand},
	{"audit", "tail [--follow]", "print the audit log of an agentd with --auth", auditUsage, flagsOf(auditFlagSet, "audit"), auditCommand},
	{"backup", "--out dir", "snapshot every stream and bucket", backupUsage, flagsOf(backupFlagSet, "backup"), backupCommand},
	{"restore", "--from dir", "restore a backup into a new node or cluster", backupUsage, flagsOf(backupFlagSet, "restore"), backupCommand},
	{"shards", "move --shards K [--data dir]", "move a stopped cluster's agents into K shard streams", shardsUsage, flagsOf(shardsFlagSet, "shards move"), shardsCommand},
	{"help", "[command]", "show this help, or a command's", "", nil, nil},
}

// lookupCommand returns the subcommand named name.
func lookupCommand(name string) (command, bool) {
	for _, c := range commands {
		if c.name == name {
			return c, true
		}
	}
	return command{}, false
}

// writeOverview writes agentd's usage: the daemon, then every subcommand
// with one line each.
func writeOverview(w io.Writer) {
	fmt.Fprint(w, `Usage:
  agentd [flags]                 run the daemon (agentd -h lists its flags)
  agentd <command> [arguments]   talk to a running agentd

Commands:
`)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, c := range commands {
		fmt.Fprintf(tw, "  %s %s\t%s\n", c.name, c.args, c.summary)
	}
	tw.Flush()
	fmt.Fprint(w, `
Run "agentd help <command>" (or "agentd <command> -h") for a command's usage.
The commands reach agentd over NATS: --server url (alias --nats-url; default
$NATS_URL, else nats://127.0.0.1:4222), --creds file (default
$FOREVER_CREDS) with auth, --tls-ca file (default $FOREVER_TLS_CA) with TLS.
FOREVER_NATS_URL is the daemon's external NATS only: the commands ignore it.
`)
}

// runHelp runs "agentd help [command]".
func runHelp(args []string, stdout, stderr io.Writer) int {
	switch {
	case len(args) == 0:
		writeOverview(stdout)
		return exitOK
	case len(args) > 1:
		fmt.Fprintf(stderr, "agentd help: one command at a time, got %q\n", strings.Join(args, " "))
		return exitUsage
	}
	c, ok := lookupCommand(args[0])
	switch {
	case !ok:
		fmt.Fprintf(stderr, "agentd help: no command %q\n\n", args[0])
		writeOverview(stderr)
		return exitUsage
	case c.usage == "":
		writeOverview(stdout)
	default:
		fmt.Fprint(stdout, c.usage)
		if c.flags != nil {
			// From the flag set the command parses: they cannot drift.
			fmt.Fprintf(stdout, "\nFlags of agentd %s:\n", c.name)
			writeFlags(stdout, c.flags(func(string) string { return "" }))
		}
	}
	return exitOK
}

// flagsOf makes a command's flag-set constructor the help table's.
func flagsOf[T any](newFlags func(cmd string, getenv func(string) string) (*flag.FlagSet, T), cmd string) func(func(string) string) *flag.FlagSet {
	return func(getenv func(string) string) *flag.FlagSet {
		fs, _ := newFlags(cmd, getenv)
		return fs
	}
}

// writeFlags lists fs's flags as the CLI spells them, one a line:
// --name value, what it does, and its default when it has one.
func writeFlags(w io.Writer, fs *flag.FlagSet) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fs.VisitAll(func(f *flag.Flag) {
		name, usage := flag.UnquoteUsage(f)
		if name != "" {
			name = " " + name
		}
		if f.DefValue != "" && f.DefValue != "0" && f.DefValue != "false" && !strings.Contains(usage, "(default") {
			usage += fmt.Sprintf(" (default %s)", f.DefValue)
		}
		fmt.Fprintf(tw, "  --%s%s\t%s\n", f.Name, name, usage)
	})
	tw.Flush()
}

const cliUsage = `Usage:
  agentd chat <agent> "text"                send a message and print the reply as it streams (--wait 5m)
  agentd tail <agent> [--from cursor]       follow the agent's latest stream
  agentd status <agent>                     show the agent's status and the calls waiting for approval
  agentd fibers <agent>                     list the agent's running fibers
  agentd tools <agent>                      list the agent's tools: name, safety, approval, source
  agentd approve <agent> <toolCallId>       approve a waiting tool call and print the resumed reply
  agentd deny <agent> <toolCallId>          deny it; the model is told

They talk to a running agentd over NATS: --server url (alias --nats-url;
default $NATS_URL, else nats://127.0.0.1:4222); with auth, --creds names a
tenant's creds file (default $FOREVER_CREDS); with TLS, --tls-ca the CA that
signed agentd's certificate (default $FOREVER_TLS_CA). On Ctrl-C, chat and
tail print the cursor to resume from (agentd tail <agent> --from <cursor>);
the turn goes on. When the connection is lost they print "connection lost,
reconnecting (cursor N)", resume by themselves once agentd is back, and give
up (exit 1) after --wait (default 5m). "agentd help" lists every command.
`

// runCLI runs the command args[0] names, one of commands. For any other
// first argument it returns handled false and the daemon runs.
func runCLI(args []string, getenv func(string) string, stdout, stderr io.Writer) (handled bool, code int) {
	if len(args) == 0 {
		return false, 0
	}
	if _, ok := lookupCommand(args[0]); !ok {
		return false, 0
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	return true, runCLIContext(ctx, args, getenv, stdout, stderr)
}

// runCLIContext runs the command args[0] names on the rest, interrupted
// when ctx ends, and returns its exit code: every command's error goes
// through exitFor.
func runCLIContext(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	c, ok := lookupCommand(args[0])
	if !ok || c.run == nil {
		return runHelp(args[1:], stdout, stderr)
	}
	err := c.run(ctx, invocation{cmd: c.name, getenv: getenv, stdout: stdout, stderr: stderr}, args[1:])
	return exitFor(ctx, c.name, c.usage, err, stdout, stderr)
}

// cliError is a failure with its exit code.
type cliError struct {
	code int
	err  error
}

func (e *cliError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.err.Error()
}

// exitSaid is the exit code of a command that has said all it had to
// (verify's report of violations): exitFor prints nothing more.
func exitSaid(code int) error { return &cliError{code: code} }

// failed makes err a failure, said on one line with exit 1, also when
// the command was interrupted (exitFor exits 130 silently for an error
// after Ctrl-C); an error that carries its own code keeps it. The client
// commands, verify and auth say why they stopped; of them only an
// interrupted stream exits 130.
func failed(err error) error {
	var ce *cliError
	if err == nil || errors.Is(err, flag.ErrHelp) || errors.As(err, &ce) {
		return err
	}
	return &cliError{exitFailed, err}
}

func usageErr(format string, a ...any) error {
	return &cliError{exitUsage, fmt.Errorf(format, a...)}
}

// oneAgent returns the one positional argument of a command that takes
// an agent id and nothing else, or its usage error.
func oneAgent(pos []string) (string, error) {
	switch {
	case len(pos) == 0:
		return "", usageErr("missing agent id")
	case len(pos) > 1:
		return "", usageErr("unexpected argument %q", pos[1])
	case !eventlog.ValidToken(pos[0]):
		return "", usageErr("%s", apierror.BadAgentID("agent id", pos[0]).Message)
	}
	return pos[0], nil
}

// printUsageErr prints a usage error of command cmd ("status", "tenant
// create") as one line, and then where its usage is: not the whole page.
func printUsageErr(w io.Writer, cmd string, err error) {
	fmt.Fprintf(w, "agentd %s: %v\n", cmd, err)
	top, _, _ := strings.Cut(cmd, " ")
	fmt.Fprintf(w, "run 'agentd help %s' for its usage\n", top)
}

// exitFor prints what err of command cmd says and returns the exit code:
// the one mapping of the subcommands' errors. --help prints usage and is
// success; a usage error is one line and where the usage is; another
// cliError its sentence (none from exitSaid) and its code; an interrupted
// command (ctx ended) exits as interrupted; anything else is a failure,
// said on one line.
func exitFor(ctx context.Context, cmd, usage string, err error, stdout, stderr io.Writer) int {
	var ce *cliError
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprint(stdout, usage)
		return exitOK
	case errors.As(err, &ce) && ce.err == nil:
		return ce.code
	case errors.As(err, &ce) && ce.code == exitUsage:
		printUsageErr(stderr, cmd, ce.err)
		return ce.code
	case errors.As(err, &ce):
		fmt.Fprintln(stderr, "agentd "+cmd+":", ce.err)
		return ce.code
	case ctx.Err() != nil:
		return exitInterrupted
	default:
		fmt.Fprintln(stderr, "agentd "+cmd+":", err)
		return exitFailed
	}
}

// flagErr words an error of the flag package as agentd does
// (agentd.FlagError): "unknown flag --x", not Go's "-x".
func flagErr(err error) error { return agentd.FlagError(err) }

// clientCommand runs chat, tail, status, fibers, tools, approve or deny
// (in.cmd).
func clientCommand(ctx context.Context, in invocation, args []string) error {
	cmd := in.cmd
	fs, o := clientCmdFlagSet(cmd, in.getenv)
	natsURL, creds, tlsCA, from, wait := o.natsURL, o.creds, o.tlsCA, o.from, o.wait
	pos, err := parseInterleaved(fs, args)
	if err == nil {
		err = checkArgs(cmd, pos, *from)
	}
	if err == nil && *wait <= 0 {
		err = usageErr("--wait must be positive, got %s", *wait)
	}
	if err == nil {
		err = runCommand(ctx, cmd, pos, *natsURL, clientOptions(*creds, *tlsCA), *from, *wait, in.stdout, in.stderr)
	}
	return failed(err)
}

// clientCmdOpts are the flags of chat, tail, status, fibers, tools,
// approve and deny.
type clientCmdOpts struct {
	natsURL, creds, tlsCA, from *string
	wait                        *time.Duration
}

// clientCmdFlagSet defines the flags of the client command cmd.
func clientCmdFlagSet(cmd string, getenv func(string) string) (*flag.FlagSet, *clientCmdOpts) {
	fs := flag.NewFlagSet("agentd "+cmd, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var o clientCmdOpts
	o.natsURL, o.creds, o.tlsCA = clientFlags(fs, getenv)
	o.from = fs.String("from", "", "`cursor` to follow after (tail only)")
	o.wait = fs.Duration("wait", defaultWait, "how long chat and tail wait for a lost connection to agentd to come back")
	return fs, &o
}

// parseInterleaved parses flags placed before, between or after the
// positional arguments, which it returns.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, usageErr("%v", flagErr(err))
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

func checkArgs(cmd string, pos []string, from string) error {
	want, second := 1, ""
	switch cmd {
	case "chat":
		want, second = 2, "message text"
	case "approve", "deny":
		want, second = 2, "tool call id"
	}
	switch {
	case len(pos) == 0:
		return usageErr("missing agent id")
	case len(pos) < want:
		return usageErr("missing %s", second)
	case len(pos) > want:
		return usageErr("unexpected argument %q (quote the message text)", pos[want])
	case !eventlog.ValidToken(pos[0]):
		return usageErr("%s", apierror.BadAgentID("agent id", pos[0]).Message)
	case cmd == "chat" && strings.TrimSpace(pos[1]) == "":
		return usageErr("empty message text")
	case from != "" && cmd != "tail":
		return usageErr("--from applies to tail only")
	}
	if from != "" {
		if _, err := replay.ParseCursor(from); err != nil {
			return usageErr("--from %q is not a cursor: %s", apierror.Echo(from), apierror.CursorRule)
		}
	}
	return nil
}

// clientFlags defines the connection flags every client command takes:
// --server (the nats CLI's name, default $NATS_URL as the nats CLI reads
// it, else nats://127.0.0.1:4222) with --nats-url as its alias, --creds and
// --tls-ca with their FOREVER_* defaults. FOREVER_NATS_URL is the daemon's
// external NATS alone: a client command never reads it, so exporting it
// for one does not change what the next daemon connects to.
func clientFlags(fs *flag.FlagSet, getenv func(string) string) (natsURL, creds, tlsCA *string) {
	url := getenv("NATS_URL")
	if url == "" {
		url = nats.DefaultURL
	}
	natsURL = fs.String("server", url, "NATS `url` of agentd (default $NATS_URL, else "+nats.DefaultURL+")")
	fs.StringVar(natsURL, "nats-url", url, "alias of --server")
	creds = fs.String("creds", getenv("FOREVER_CREDS"), "NATS creds `file` (a tenant's with auth, or the admin's)")
	tlsCA = fs.String("tls-ca", getenv("FOREVER_TLS_CA"), "CA `file` that signed agentd's certificate (with --tls-cert)")
	return natsURL, creds, tlsCA
}

// newClientFlagSet is a flag set for a client command's flags.
func newClientFlagSet() *flag.FlagSet {
	fs := flag.NewFlagSet("agentd", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return fs
}

// serverSet reports whether fs's --server (or its alias --nats-url) was
// given.
func serverSet(fs *flag.FlagSet) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == "server" || f.Name == "nats-url" })
	return set
}

// clientOptions are the NATS options of a client command: a creds file and
// a CA, each when given.
func clientOptions(creds, tlsCA string) []nats.Option {
	var opts []nats.Option
	if creds != "" {
		opts = append(opts, nats.UserCredentials(creds))
	}
	if tlsCA != "" {
		opts = append(opts, nats.RootCAs(tlsCA))
	}
	return opts
}

func runCommand(ctx context.Context, cmd string, pos []string, natsURL string, opts []nats.Option, from string,
	wait time.Duration, stdout, stderr io.Writer) error {
	ctx, giveUp := context.WithCancelCause(ctx)
	defer giveUp(nil)
	ln := &link{stderr: stderr, wait: wait, agent: pos[0], giveUp: giveUp}
	opts = append(opts, nats.Name("agentd "+cmd), nats.Timeout(cliConnectTimeout),
		nats.MaxReconnects(-1), nats.ReconnectWait(cliReconnectWait), nats.ReconnectJitter(0, 0),
		nats.PingInterval(cliPingInterval), nats.MaxPingsOutstanding(cliPingsMissed),
		nats.DisconnectErrHandler(ln.lost), nats.ReconnectHandler(ln.back))
	nc, err := nats.Connect(natsURL, opts...)
	if err != nil {
		return connectError(natsURL, opts, err)
	}
	defer func() {
		ln.closing.Store(true)
		nc.Close()
	}()
	agent := pos[0]
	switch cmd {
	case "fibers":
		var rows []host.FiberInfo
		if err := request(ctx, nc, agent, "fibers", nil, &rows); err != nil {
			return ln.explain(ctx, err)
		}
		return printFibers(stdout, rows)
	case "status":
		var st host.Status
		if err := request(ctx, nc, agent, "status", nil, &st); err != nil {
			return ln.explain(ctx, err)
		}
		return printStatus(stdout, st)
	case "tools":
		var reply chathost.ToolsReply
		if err := request(ctx, nc, agent, "tools", nil, &reply); err != nil {
			return ln.explain(ctx, err)
		}
		return printTools(stdout, reply.Tools)
	case "chat":
		return ln.explain(ctx, chatCommand(ctx, nc, ln, agent, pos[1], stdout, stderr))
	case "approve", "deny":
		body := map[string]any{"toolCallId": pos[1], "approved": cmd == "approve"}
		return ln.explain(ctx, turnCommand(ctx, nc, ln, agent, "approve", body, stdout, stderr))
	default: // tail
		var after replay.Cursor
		if from != "" {
			after, _ = replay.ParseCursor(from) // checked by checkArgs
		}
		client, err := openClient(ctx, nc)
		if err != nil {
			return ln.explain(ctx, err)
		}
		stream, err := client.Latest(ctx, agent)
		if errors.Is(err, replay.ErrUnknownStream) {
			return &cliError{exitFailed, fmt.Errorf("agent %s has no stream yet: nothing to follow until it answers a message", agent)}
		}
		if err != nil {
			return ln.explain(ctx, err)
		}
		return ln.explain(ctx, followStream(ctx, nc, ln, client, agent, stream, after, false, stdout, stderr))
	}
}

// link watches a client command's connection to agentd: when it is lost it
// says so on stderr with the cursor to resume from, and when it stays lost
// for --wait it gives the command up (errGaveUp through the context).
type link struct {
	stderr  io.Writer
	wait    time.Duration
	agent   string
	giveUp  context.CancelCauseFunc
	cursor  atomic.Pointer[replay.Cursor] // the last cursor printed
	closing atomic.Bool                   // the command is done: a disconnect is ours
	lost_   atomic.Uint64                 // connections lost so far

	mu    sync.Mutex
	timer *time.Timer // runs out --wait after the connection was lost
}

// gaveUp is the cause of a command given up after --wait.
type gaveUp struct {
	wait   time.Duration
	agent  string
	cursor replay.Cursor
}

func (g *gaveUp) Error() string {
	return fmt.Sprintf("no connection to agentd for %s (--wait); gave up; the turn goes on: resume with agentd tail %s --from %s",
		g.wait, g.agent, g.cursor)
}

// lost is the connection's disconnect handler.
func (l *link) lost(_ *nats.Conn, _ error) {
	if l.closing.Load() {
		return
	}
	l.lost_.Add(1)
	fmt.Fprintf(l.stderr, "connection lost, reconnecting (cursor %s)\n", l.lastCursor())
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.timer == nil {
		l.timer = time.AfterFunc(l.wait, func() {
			l.giveUp(&gaveUp{wait: l.wait, agent: l.agent, cursor: l.lastCursor()})
		})
	}
}

// lastCursor returns the last cursor printed (the zero cursor before any).
func (l *link) lastCursor() replay.Cursor {
	if c := l.cursor.Load(); c != nil {
		return *c
	}
	return replay.Cursor{}
}

// back is the connection's reconnect handler.
func (l *link) back(nc *nats.Conn) {
	l.mu.Lock()
	if l.timer != nil {
		l.timer.Stop()
		l.timer = nil
	}
	l.mu.Unlock()
	fmt.Fprintf(l.stderr, "reconnected to %s\n", nc.ConnectedUrlRedacted())
}

// explain turns an error after the command was given up into the give-up
// error (exit 1, naming the cursor), and leaves others as they are.
func (l *link) explain(ctx context.Context, err error) error {
	var g *gaveUp
	if err != nil && errors.As(context.Cause(ctx), &g) {
		g.cursor = l.lastCursor()
		return &cliError{exitFailed, g}
	}
	return err
}

// request sends a command to agentd and decodes its reply into out. A
// micro service error (headers Nats-Service-Error-Code and
// Nats-Service-Error) comes back as an error naming both.
func request(ctx context.Context, nc *nats.Conn, agent, verb string, body any, out any) error {
	return requestWith(ctx, nc, agent, verb, body, nil, out)
}

// requestWith is request with headers hdr (nil: none).
func requestWith(ctx context.Context, nc *nats.Conn, agent, verb string, body any, hdr nats.Header, out any) error {
	subject := eventlog.DefaultPrefix + ".cmd." + agent + "." + verb
	var data []byte
	if body != nil {
		var err error
		if data, err = json.Marshal(body); err != nil {
			return err
		}
	}
	rctx, cancel := context.WithTimeout(ctx, cliRequestTimeout)
	defer cancel()
	msg, err := nc.RequestMsgWithContext(rctx, &nats.Msg{Subject: subject, Data: data, Header: hdr})
	if errors.Is(err, nats.ErrNoResponders) {
		return fmt.Errorf("no agentd answers on %s (is agentd running and connected to %s?)", subject, nc.ConnectedUrlRedacted())
	}
	if err != nil {
		return fmt.Errorf("%s: %w", subject, err)
	}
	if code := msg.Header.Get("Nats-Service-Error-Code"); code != "" {
		return fmt.Errorf("agentd answered %s: %s", code, msg.Header.Get("Nats-Service-Error"))
	}
	if err := json.Unmarshal(msg.Data, out); err != nil {
		return fmt.Errorf("decode %s reply: %w", verb, err)
	}
	return nil
}

func chatCommand(ctx context.Context, nc *nats.Conn, ln *link, agent, text string, stdout, stderr io.Writer) error {
	return turnCommand(ctx, nc, ln, agent, "chat", map[string]string{"text": text}, stdout, stderr)
}

// turnCommand sends a verb that starts a turn (chat, approve) and prints
// the turn's stream.
func turnCommand(ctx context.Context, nc *nats.Conn, ln *link, agent, verb string, body any, stdout, stderr io.Writer) error {
	client, err := openClient(ctx, nc)
	if err != nil {
		return err
	}
	var r chathost.Reply
	if err := request(ctx, nc, agent, verb, body, &r); err != nil {
		return err
	}
	if !eventlog.ValidToken(r.StreamID) {
		return fmt.Errorf("agentd replied stream id %q", r.StreamID)
	}
	return followStream(ctx, nc, ln, client, agent, r.StreamID, r.Cursor, true, stdout, stderr)
}

// followStream prints a stream from after until its end, and resumes from
// the last cursor printed when the follow fails while the connection was
// lost (agentd restarted, or the network went away), until the stream ends
// or ctx does (Ctrl-C, or --wait ran out).
func followStream(ctx context.Context, nc *nats.Conn, ln *link, client *replay.Client, agent, stream string,
	after replay.Cursor, turn bool, stdout, stderr io.Writer) error {
	cursor := after
	ln.cursor.Store(&cursor)
	for {
		lostBefore := ln.lost_.Load()
		items := client.Follow(ctx, agent, stream, cursor)
		if turn {
			items = client.FollowTurn(ctx, agent, stream, cursor)
		}
		var err error
		cursor, err = printStream(ctx, agent, items, cursor, func(c replay.Cursor) { ln.cursor.Store(&c) }, stdout, stderr)
		var ce *cliError
		if err == nil || ctx.Err() != nil || errors.As(err, &ce) ||
			(ln.lost_.Load() == lostBefore && nc.IsConnected()) {
			return err
		}
		// The follow broke with the connection: wait until it is back,
		// then resume after the last chunk printed.
		for !nc.IsConnected() {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(cliReconnectWait):
			}
		}
	}
}

// openClient opens the log bound to agentd's streams, for reading. With
// creds (a tenant's, of an agentd with --auth) it reaches JetStream
// through agentd's API prefix: a tenant's client may not use $JS.API.
func openClient(ctx context.Context, nc *nats.Conn) (*replay.Client, error) {
	cfg := eventlog.Config{Conn: nc, Bind: true, ChunksOnly: true, Logger: slog.New(slog.DiscardHandler)}
	if nc.Opts.UserJWT != nil {
		cfg.APIPrefix = auth.ClientAPIPrefix
	}
	lg, err := eventlog.Open(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return replay.NewClient(lg), nil
}

// byRef is what printStream shows of a chunk's payload: the payload, or,
// for one the chunk holds by reference, where to read it.
func byRef(v []byte, r *blob.Ref) string {
	if r == nil {
		return string(v)
	}
	name, _ := r.Name()
	return fmt.Sprintf("stored by reference, %d bytes: nats object get %s %s", r.Size, blob.Bucket, name)
}

// printStream prints a followed stream of agent: text to stdout as it arrives, tool
// calls and errors to stderr; reasoning is skipped. It returns the cursor of
// the last chunk printed (after when none), telling seen each. When ctx ends
// by Ctrl-C it prints the cursor to resume from and exits 130; the turn
// goes on.
func printStream(ctx context.Context, agent string, items func(func(replay.Item, error) bool), after replay.Cursor,
	seen func(replay.Cursor), stdout, stderr io.Writer) (replay.Cursor, error) {
	cursor := after
	for it, err := range items {
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			return cursor, err
		}
		cursor = it.Cursor
		seen(cursor)
		c := it.Chunk
		switch c.Type {
		case chunk.TextDelta:
			fmt.Fprint(stdout, c.Delta)
		case chunk.TextEnd:
			fmt.Fprintln(stdout)
		case chunk.ToolInput:
			fmt.Fprintf(stderr, "[tool %s %s (call %s)]\n", c.ToolName, byRef(c.Input, c.Blobs.Ref("input")), c.ToolCallID)
		case chunk.ToolOutput:
			fmt.Fprintf(stderr, "[tool output %s]\n", byRef(c.Output, c.Blobs.Ref("output")))
		case chunk.ToolOutputError, chunk.ToolInputError:
			fmt.Fprintf(stderr, "[tool error: %s]\n", c.ErrorText)
		case chunk.ToolOutputDenied:
			fmt.Fprintf(stderr, "[tool call %s denied]\n", c.ToolCallID)
		case chunk.ToolApprovalRequest:
			fmt.Fprintf(stderr, "[call %s waits for approval: agentd approve|deny %s %s]\n", c.ToolCallID, agent, c.ToolCallID)
		case chunk.Error:
			return cursor, &cliError{exitFailed, fmt.Errorf("turn failed: %s", c.ErrorText)}
		case chunk.Abort:
			return cursor, &cliError{exitFailed, errors.New("turn aborted")}
		}
	}
	if ctx.Err() != nil {
		if context.Cause(ctx) != ctx.Err() {
			return cursor, context.Cause(ctx) // given up: the caller explains
		}
		fmt.Fprintln(stdout)
		fmt.Fprintf(stderr, "cursor: %s\n", cursor)
		return cursor, &cliError{exitInterrupted, fmt.Errorf("interrupted; the turn goes on; resume with --from %s", cursor)}
	}
	return cursor, nil
}

func printFibers(w io.Writer, rows []host.FiberInfo) error {
	if len(rows) == 0 {
		_, err := fmt.Fprintln(w, "no fibers")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	// ATTEMPT is the fiber's run: 1 for the first, n+1 after n recoveries.
	fmt.Fprintln(tw, "ID\tNAME\tATTEMPT\tCREATED")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", r.ID, r.Name, r.Recoveries+1, r.CreatedAt)
	}
	return tw.Flush()
}

// pendingApprovals reads a chat agent's pending approvals from its status
// detail (chat.Status), and takes them out of it: status lists them on
// lines of their own. ok is false for a detail that has none (an agent of
// another type).
func pendingApprovals(detail any) (out []chat.PendingApproval, ok bool) {
	m, isMap := detail.(map[string]any)
	if !isMap {
		return nil, false
	}
	raw, ok := m["pendingApprovals"]
	if !ok {
		return nil, false
	}
	delete(m, "pendingApprovals")
	if b, err := json.Marshal(raw); err == nil {
		_ = json.Unmarshal(b, &out)
	}
	return out, true
}

// printTools prints the tools verb's reply as a table.
func printTools(w io.Writer, tools []chat.ToolInfo) error {
	if len(tools) == 0 {
		_, err := fmt.Fprintln(w, "no tools")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tSAFETY\tAPPROVAL\tSOURCE\tDESCRIPTION")
	for _, t := range tools {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", t.Name, t.Safety, t.Approval, t.Source, oneLine(t.Description, 80))
	}
	return tw.Flush()
}

// oneLine is s on one line, cut to at most n runes.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

func printStatus(w io.Writer, st host.Status) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "agent\t%s\n", st.Agent)
	fmt.Fprintf(tw, "type\t%s\n", st.Type)
	fmt.Fprintf(tw, "active\t%v\n", st.Active)
	fmt.Fprintf(tw, "fibers\t%d\n", st.Fibers)
	fmt.Fprintf(tw, "schedules\t%d\n", st.Schedules)
	fmt.Fprintf(tw, "keepalive\t%d\n", st.KeepAlive)
	if st.Owner != "" {
		fmt.Fprintf(tw, "partition\t%d\n", st.Partition)
		fmt.Fprintf(tw, "owner\t%s (epoch %d)\n", st.Owner, st.Epoch)
	}
	pending, chatAgent := pendingApprovals(st.Detail)
	kids := childrenOf(st.Detail)
	if st.Detail != nil {
		d, err := json.Marshal(st.Detail)
		if err == nil {
			fmt.Fprintf(tw, "detail\t%s\n", d)
		}
	}
	if chatAgent && len(pending) == 0 {
		fmt.Fprintf(tw, "approvals\tnone pending\n")
	}
	for _, p := range pending {
		fmt.Fprintf(tw, "approval\t%s %s %s (agentd approve|deny %s %s)\n", p.ToolCallID, p.ToolName, oneLine(string(p.Input), 60), st.Agent, p.ToolCallID)
	}
	for _, c := range kids {
		fmt.Fprintf(tw, "child\t%s (%s, call %s) %s, stream %s\n", c.Agent, c.Mode, c.CallID, c.Status, c.StreamID)
	}
	return tw.Flush()
}

// childrenOf reads a chat agent's sub-agent calls in flight from its
// status detail (chat.Status's children), and takes them out of it:
// status lists them on lines of their own.
func childrenOf(detail any) (out []chat.ChildLink) {
	m, isMap := detail.(map[string]any)
	if !isMap {
		return nil
	}
	raw, ok := m["children"]
	if !ok {
		return nil
	}
	delete(m, "children")
	if b, err := json.Marshal(raw); err == nil {
		_ = json.Unmarshal(b, &out)
	}
	return out
}
