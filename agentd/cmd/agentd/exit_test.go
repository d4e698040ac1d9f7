package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"testing"
)

// TestExitFor: the one mapping of a command's error to its output and
// exit code, kind by kind.
func TestExitFor(t *testing.T) {
	live := context.Background()
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	hint := "run 'agentd help tenant' for its usage\n"
	for _, tt := range []struct {
		name           string
		ctx            context.Context
		err            error
		code           int
		stdout, stderr string
	}{
		{"success", live, nil, exitOK, "", ""},
		{"help", live, flag.ErrHelp, exitOK, "USAGE\n", ""},
		{"help wrapped", live, fmt.Errorf("parse: %w", flag.ErrHelp), exitOK, "USAGE\n", ""},
		{"usage error", live, usageErr("missing agent id"), exitUsage, "", "agentd tenant create: missing agent id\n" + hint},
		{"usage error wrapped", live, fmt.Errorf("x: %w", usageErr("bad")), exitUsage, "", "agentd tenant create: bad\n" + hint},
		{"usage error interrupted", ended, usageErr("bad"), exitUsage, "", "agentd tenant create: bad\n" + hint},
		{"failure with its code", live, &cliError{exitFailed, errors.New("turn aborted")}, exitFailed, "", "agentd tenant create: turn aborted\n"},
		{"interrupted stream", ended, &cliError{exitInterrupted, errors.New("interrupted; resume with --from 7")}, exitInterrupted, "", "agentd tenant create: interrupted; resume with --from 7\n"},
		{"said already", live, exitSaid(exitFailed), exitFailed, "", ""},
		{"said already interrupted", ended, exitSaid(exitFailed), exitFailed, "", ""},
		{"plain error", live, errors.New("no agentd answers"), exitFailed, "", "agentd tenant create: no agentd answers\n"},
		{"plain error interrupted", ended, errors.New("context canceled"), exitInterrupted, "", ""},
		{"failed interrupted", ended, failed(errors.New("connect: refused")), exitFailed, "", "agentd tenant create: connect: refused\n"},
		{"failed keeps usage", live, failed(usageErr("bad")), exitUsage, "", "agentd tenant create: bad\n" + hint},
		{"failed keeps help", live, failed(flag.ErrHelp), exitOK, "USAGE\n", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := exitFor(tt.ctx, "tenant create", "USAGE\n", tt.err, &out, &errb)
			if code != tt.code || out.String() != tt.stdout || errb.String() != tt.stderr {
				t.Errorf("exit %d, stdout %q, stderr %q; want exit %d, stdout %q, stderr %q",
					code, out.String(), errb.String(), tt.code, tt.stdout, tt.stderr)
			}
		})
	}
	if failed(nil) != nil {
		t.Error("failed(nil) is not nil")
	}
}

// TestCLICommandTable: every command but help runs from the table, and
// runCLI handles exactly the table's names.
func TestCLICommandTable(t *testing.T) {
	seen := map[string]bool{}
	for _, c := range commands {
		if seen[c.name] {
			t.Errorf("command %s listed twice", c.name)
		}
		seen[c.name] = true
		if (c.run == nil) != (c.name == "help") {
			t.Errorf("command %s: run set %v", c.name, c.run != nil)
		}
	}
	for _, name := range []string{"serve", "nope", "-h", "--data"} {
		if handled, _ := runCLI([]string{name}, func(string) string { return "" }, &bytes.Buffer{}, &bytes.Buffer{}); handled {
			t.Errorf("runCLI(%q) handled", name)
		}
	}
}
