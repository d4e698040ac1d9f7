package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/forever-agents/forever/chat"
	"github.com/forever-agents/forever/chat/chatreplay"
	"github.com/forever-agents/forever/eventlog"
)

const replayUsage = `Usage:
  agentd replay <agent> [--turn <requestId>] [--server url]
                                   replay the agent's recorded turns, read from a running agentd
  agentd replay <agent> [--turn <requestId>] --data dir
                                   the same, read from a stopped agentd's data dir

Runs the agent's recorded chat turns through this binary's chat agent code
(its built-in tools clock, note, blob and agent) with the recorded model
outputs and tool results, as Temporal's replayer runs workflow histories:
no model is called, no tool runs, and nothing is written to the agent's
log (the turns run on a throwaway embedded server in a temporary
directory). Each recorded user message is sent again, in order, and the new
turn is compared with the recorded one: the tool calls it made (tool and
input) and their outcomes, then the events it stored (types, messages,
finish reason, usage). Prints one line per turn, then a summary:

  Fq2...k same
  Fq2...x differs: model call 1: the recorded model called weather {"city":"Paris"} (call_1), a tool the new code does not offer
  Fq2...z skipped: it continues an earlier answer
  3 turns: 1 same, 1 differs, 1 skipped

--turn reports only that turn (the turns before it are replayed too: they
build its conversation). A turn that answered tool calls (approve, deny, a
client's result) is replayed with the recorded answers; one that continued
an earlier answer, was interrupted (cancel, stop) or still runs is skipped. Calls of MCP tools (--mcp) are differences:
the replay offers the built-in tools only.

Exit status: 0 when no replayed turn differs, 1 when one does (or the log
could not be read), 2 bad usage. --server (alias --nats-url) defaults to
$NATS_URL or nats://127.0.0.1:4222; --creds and --tls-ca as for the other
commands.
`

// replayOpts are the flags of replay.
type replayOpts struct {
	natsURL, creds, tlsCA *string
	data, turn            string
	timeout               time.Duration
}

// replayFlagSet defines the flags of replay.
func replayFlagSet(cmd string, getenv func(string) string) (*flag.FlagSet, *replayOpts) {
	fs := flag.NewFlagSet("agentd "+cmd, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var o replayOpts
	o.natsURL, o.creds, o.tlsCA = clientFlags(fs, getenv)
	fs.StringVar(&o.data, "data", "", "data `dir` of a stopped agentd to read the agent from")
	fs.StringVar(&o.turn, "turn", "", "the `requestId` of the only turn to report")
	fs.DurationVar(&o.timeout, "timeout", 5*time.Minute, "give up after this long")
	return fs, &o
}

// replayCommand runs "agentd replay".
func replayCommand(ctx context.Context, in invocation, args []string) error {
	getenv, stdout := in.getenv, in.stdout
	fs, o := replayFlagSet("replay", getenv)
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if _, err := oneAgent(pos); err != nil {
		return err
	}
	switch {
	case o.data != "" && serverSet(fs):
		return usageErr("give --server or --data, not both")
	case o.timeout <= 0:
		return usageErr("--timeout must be positive, got %s", o.timeout)
	}
	agent := pos[0]
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	var rec *chatreplay.Recording
	if o.data != "" {
		rec, err = recordingOfDataDir(ctx, o.data, agent)
	} else {
		rec, err = recordingOfURL(ctx, *o.natsURL, append(clientOptions(*o.creds, *o.tlsCA), nats.Name("agentd replay")), agent)
	}
	if err != nil {
		return err
	}
	if len(rec.Events) == 0 {
		return &cliError{exitFailed, fmt.Errorf("agent %s has no events: nothing to replay", agent)}
	}
	tools, err := builtinTools(os.TempDir()) // never run: the replay answers from the recording
	if err != nil {
		return err
	}
	results, err := chatreplay.Run(ctx, rec, chatreplay.Options{
		Configure: func(c *chat.Config) { c.Tools = tools },
		Turn:      o.turn,
	})
	switch {
	case errors.Is(err, chatreplay.ErrNoTurn):
		return &cliError{exitFailed, fmt.Errorf("agent %s has no turn with request id %q", agent, o.turn)}
	case err != nil:
		return err
	}
	var same, differs, skipped int
	for _, r := range results {
		fmt.Fprintln(stdout, r.RequestID, r)
		switch {
		case r.Skipped != "":
			skipped++
		case r.Diff != "":
			differs++
		default:
			same++
		}
	}
	fmt.Fprintf(stdout, "%d turns: %d same, %d differs, %d skipped\n", len(results), same, differs, skipped)
	if differs > 0 {
		return &cliError{exitFailed, fmt.Errorf("%d of %d turns differ", differs, len(results))}
	}
	return nil
}

// recordingOfURL reads agent's recording from the agentd serving natsURL.
func recordingOfURL(ctx context.Context, natsURL string, opts []nats.Option, agent string) (*chatreplay.Recording, error) {
	nc, err := nats.Connect(natsURL, opts...)
	if err != nil {
		return nil, connectError(natsURL, opts, err)
	}
	defer nc.Close()
	return recordingOf(ctx, nc, agent)
}

// recordingOfDataDir reads agent's recording from a stopped agentd's data
// dir (see serveDataDir).
func recordingOfDataDir(ctx context.Context, dir, agent string) (*chatreplay.Recording, error) {
	nc, release, err := connectDataDir(dir, false, "agentd replay")
	if err != nil {
		return nil, err
	}
	defer release()
	return recordingOf(ctx, nc, agent)
}

// recordingOf binds to agentd's streams over nc and reads agent's events
// and chunks.
func recordingOf(ctx context.Context, nc *nats.Conn, agent string) (*chatreplay.Recording, error) {
	lg, err := eventlog.Open(ctx, eventlog.Config{Conn: nc, Bind: true, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return nil, err
	}
	defer lg.Close()
	return chatreplay.Read(ctx, lg, agent)
}
