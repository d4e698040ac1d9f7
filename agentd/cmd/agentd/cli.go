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
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/forever-agents/forever/agentd/chathost"
	"github.com/forever-agents/forever/agentd/host"
	"github.com/forever-agents/forever/auth"
	"github.com/forever-agents/forever/chat"
	"github.com/forever-agents/forever/eventlog"
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

const cliUsage = `Usage:
  agentd chat <agent> "text" [--nats-url url]   send a message and print the reply as it streams
  agentd tail <agent> [--from cursor]            follow the agent's latest stream
  agentd fibers <agent>                          list the agent's running fibers
  agentd status <agent>                          show the agent's status
  agentd approve <agent> <toolCallId>            approve a waiting tool call and print the resumed reply
  agentd deny <agent> <toolCallId>               deny it; the model is told
  agentd agents [--user u] [--tag t] [--type x]  list the agents (agentd agents -h)
  agentd delete <agent> [--tenant name]          delete an agent and its history (agentd delete -h)
  agentd verify [--data dir]                     check the log's invariants (agentd verify -h)
  agentd tenant create|revoke|disable|enable|token revoke <name> ...
                                                 manage tenants of an agentd with --auth (agentd tenant -h)
  agentd auth server-config|admin-creds ...     print the nats-server config for --auth --nats-url, or an admin credential (agentd auth -h)
  agentd audit tail [--follow]                   print the audit log of an agentd with --auth (agentd audit -h)
  agentd backup --out dir                        snapshot every stream and bucket (agentd backup -h)
  agentd restore --from dir                      restore a backup into a new node or cluster (agentd restore -h)

They talk to a running agentd over NATS: --nats-url, default $FOREVER_NATS_URL
or nats://127.0.0.1:4222; with auth, --creds names a tenant's creds file
(default $FOREVER_CREDS); with TLS, --tls-ca the CA that signed agentd's
certificate (default $FOREVER_TLS_CA). On Ctrl-C, chat and tail print the cursor to resume
from (agentd tail <agent> --from <cursor>); the turn goes on.
`

// runCLI runs the client commands chat, tail, fibers and status. For any
// other first argument it returns handled false and the daemon runs.
func runCLI(args []string, getenv func(string) string, stdout, stderr io.Writer) (handled bool, code int) {
	if len(args) == 0 {
		return false, 0
	}
	switch args[0] {
	case "chat", "tail", "fibers", "status", "approve", "deny", "verify", "tenant", "auth", "audit", "backup", "restore", "agents", "delete":
	default:
		return false, 0
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	switch args[0] {
	case "verify":
		return true, runVerify(ctx, args[1:], getenv, stdout, stderr)
	case "tenant":
		return true, runTenant(ctx, args[1:], getenv, stdout, stderr)
	case "auth":
		return true, runAuth(args[1:], getenv, stdout, stderr)
	case "audit":
		return true, runAudit(ctx, args[1:], getenv, stdout, stderr)
	case "backup", "restore":
		return true, runBackup(ctx, args[0], args[1:], getenv, stdout, stderr)
	case "agents", "delete":
		return true, runAgentsCLI(ctx, args[0], args[1:], getenv, stdout, stderr)
	}
	return true, runCLIContext(ctx, args, getenv, stdout, stderr)
}

// cliError is a failure with its exit code.
type cliError struct {
	code int
	err  error
}

func (e *cliError) Error() string { return e.err.Error() }

func usageErr(format string, a ...any) error {
	return &cliError{exitUsage, fmt.Errorf(format, a...)}
}

// runCLIContext is runCLI for a known command, interrupted when ctx ends.
func runCLIContext(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	cmd := args[0]
	fs := flag.NewFlagSet("agentd "+cmd, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	natsURL, creds, tlsCA := clientFlags(fs, getenv)
	from := fs.String("from", "", "cursor to follow after (tail)")
	pos, err := parseInterleaved(fs, args[1:])
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stdout, cliUsage)
		return exitOK
	}
	if err == nil {
		err = checkArgs(cmd, pos, *from)
	}
	if err == nil {
		err = runCommand(ctx, cmd, pos, *natsURL, clientOptions(*creds, *tlsCA), *from, stdout, stderr)
	}
	var ce *cliError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &ce):
		fmt.Fprintln(stderr, "agentd "+cmd+":", ce.err)
		if ce.code == exitUsage {
			fmt.Fprint(stderr, "\n"+cliUsage)
		}
		return ce.code
	default:
		fmt.Fprintln(stderr, "agentd "+cmd+":", err)
		return exitFailed
	}
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
			return nil, usageErr("%v", err)
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
		return usageErr("agent id %q is not valid (no '.', '*', '>', spaces)", pos[0])
	case cmd == "chat" && strings.TrimSpace(pos[1]) == "":
		return usageErr("empty message text")
	case from != "" && cmd != "tail":
		return usageErr("--from applies to tail only")
	}
	if from != "" {
		if _, err := replay.ParseCursor(from); err != nil {
			return &cliError{exitUsage, fmt.Errorf("--from: %w", err)}
		}
	}
	return nil
}

// clientFlags defines the connection flags every client command takes,
// --nats-url, --creds and --tls-ca, with their FOREVER_* defaults.
func clientFlags(fs *flag.FlagSet, getenv func(string) string) (natsURL, creds, tlsCA *string) {
	url := getenv("FOREVER_NATS_URL")
	if url == "" {
		url = nats.DefaultURL
	}
	natsURL = fs.String("nats-url", url, "NATS url of agentd")
	creds = fs.String("creds", getenv("FOREVER_CREDS"), "NATS creds file (a tenant's with auth, or the admin's)")
	tlsCA = fs.String("tls-ca", getenv("FOREVER_TLS_CA"), "CA file that signed agentd's certificate (with --tls-cert)")
	return natsURL, creds, tlsCA
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

func runCommand(ctx context.Context, cmd string, pos []string, natsURL string, opts []nats.Option, from string, stdout, stderr io.Writer) error {
	opts = append(opts, nats.Name("agentd "+cmd))
	nc, err := nats.Connect(natsURL, opts...)
	if err != nil {
		return fmt.Errorf("connect to NATS at %s (is agentd running?): %w", natsURL, err)
	}
	defer nc.Close()
	agent := pos[0]
	switch cmd {
	case "fibers":
		var rows []host.FiberInfo
		if err := request(ctx, nc, agent, "fibers", nil, &rows); err != nil {
			return err
		}
		return printFibers(stdout, rows)
	case "status":
		var st host.Status
		if err := request(ctx, nc, agent, "status", nil, &st); err != nil {
			return err
		}
		return printStatus(stdout, st)
	case "chat":
		return chatCommand(ctx, nc, agent, pos[1], stdout, stderr)
	case "approve", "deny":
		body := map[string]any{"toolCallId": pos[1], "approved": cmd == "approve"}
		return turnCommand(ctx, nc, agent, "approve", body, stdout, stderr)
	default: // tail
		var after replay.Cursor
		if from != "" {
			after, _ = replay.ParseCursor(from) // checked by checkArgs
		}
		client, err := openClient(ctx, nc)
		if err != nil {
			return err
		}
		stream, err := client.Latest(ctx, agent)
		if err != nil {
			return err
		}
		return printStream(ctx, client.Follow(ctx, agent, stream, after), after, stdout, stderr)
	}
}

// request sends a command to agentd and decodes its reply into out. A
// micro service error (headers Nats-Service-Error-Code and
// Nats-Service-Error) comes back as an error naming both.
func request(ctx context.Context, nc *nats.Conn, agent, verb string, body any, out any) error {
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
	msg, err := nc.RequestWithContext(rctx, subject, data)
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

func chatCommand(ctx context.Context, nc *nats.Conn, agent, text string, stdout, stderr io.Writer) error {
	return turnCommand(ctx, nc, agent, "chat", map[string]string{"text": text}, stdout, stderr)
}

// turnCommand sends a verb that starts a turn (chat, approve) and prints
// the turn's stream.
func turnCommand(ctx context.Context, nc *nats.Conn, agent, verb string, body any, stdout, stderr io.Writer) error {
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
	after := r.Cursor
	return printStream(ctx, client.FollowTurn(ctx, agent, r.StreamID, after), after, stdout, stderr)
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

// printStream prints a followed stream: text to stdout as it arrives, tool
// calls and errors to stderr; reasoning is skipped. When ctx ends (Ctrl-C)
// it prints the cursor to resume from and exits 130; the turn goes on.
func printStream(ctx context.Context, items func(func(replay.Item, error) bool), after replay.Cursor, stdout, stderr io.Writer) error {
	cursor := after
	for it, err := range items {
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			return err
		}
		cursor = it.Cursor
		c := it.Chunk
		switch c.Type {
		case chat.ChunkTextDelta:
			fmt.Fprint(stdout, c.Delta)
		case chat.ChunkTextEnd:
			fmt.Fprintln(stdout)
		case chat.ChunkToolInput:
			fmt.Fprintf(stderr, "[tool %s %s (call %s)]\n", c.ToolName, c.Input, c.ToolCallID)
		case chat.ChunkToolOutput:
			fmt.Fprintf(stderr, "[tool output %s]\n", c.Output)
		case chat.ChunkToolOutputError, chat.ChunkToolInputError:
			fmt.Fprintf(stderr, "[tool error: %s]\n", c.ErrorText)
		case chat.ChunkToolDenied:
			fmt.Fprintf(stderr, "[tool call %s denied]\n", c.ToolCallID)
		case chat.ChunkToolApproval:
			fmt.Fprintf(stderr, "[call %s waits for approval: agentd approve|deny <agent> %s]\n", c.ToolCallID, c.ToolCallID)
		case chat.ChunkError:
			return &cliError{exitFailed, fmt.Errorf("turn failed: %s", c.ErrorText)}
		case chat.ChunkAbort:
			return &cliError{exitFailed, errors.New("turn aborted")}
		}
	}
	if ctx.Err() != nil {
		fmt.Fprintln(stdout)
		fmt.Fprintf(stderr, "cursor: %s\n", cursor)
		return &cliError{exitInterrupted, fmt.Errorf("interrupted; the turn goes on; resume with --from %s", cursor)}
	}
	return nil
}

func printFibers(w io.Writer, rows []host.FiberInfo) error {
	if len(rows) == 0 {
		_, err := fmt.Fprintln(w, "no fibers")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tATTEMPT\tCREATED")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", r.ID, r.Name, r.Attempt, r.CreatedAt)
	}
	return tw.Flush()
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
	if st.Detail != nil {
		d, err := json.Marshal(st.Detail)
		if err == nil {
			fmt.Fprintf(tw, "detail\t%s\n", d)
		}
	}
	return tw.Flush()
}
