package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/forever-agents/forever/agentd/agentdtest"
	"github.com/forever-agents/forever/agentd/demo"
)

// nodePaths finds Node.js and npm (Debian's nodejs and npm, installed by
// .ci/run).
func nodePaths(t *testing.T) (node, npm string) {
	node, errNode := exec.LookPath("node")
	npm, errNpm := exec.LookPath("npm")
	if errNode == nil && errNpm == nil {
		return node, npm
	}
	if os.Getenv("CI") != "" {
		t.Fatal("node or npm not found: .ci/run installs Debian's nodejs and npm packages")
	}
	t.Skip("node or npm not installed (apt-get install nodejs npm)")
	return "", ""
}

// aisdkFlows are the flows testdata/aisdk/chat.mjs runs for each major
// version of the AI SDK ("ai" on npm): tool approvals came with AI SDK 6.
var aisdkFlows = map[string][]string{
	"5": {"server", "client", "resume", "stop", "subagent", "regenerate", "edit", "regenerate-light", "edit-light"},
	"6": {"server", "client", "approval", "resume", "stop", "subagent", "regenerate", "edit", "regenerate-light", "edit-light"},
	"7": {"server", "client", "approval", "resume", "stop", "subagent", "regenerate", "edit", "regenerate-light", "edit-light", "long"},
}

// testBinaryAISDK: a stock Vercel AI SDK chat client (AbstractChat, the
// core of useChat, over DefaultChatTransport), for ai 5, 6 and 7, talks to
// agentd's HTTP gateway: a server tool, a client tool answered with
// addToolResult, an approval answered with addToolApprovalResponse (6 and
// later), a resumeStream from a new client while a tool runs, a Stop as
// docs/reference.md wires it (the turn aborted, the partial kept), and a
// sub-agent call whose data-subagent part a second client follows to the
// child's stream, a regenerate and an edit of an earlier message (with
// the whole conversation in each request, and with only the new message,
// as docs/reference.md's setup sends it), and (ai 7) a request whose
// history is more than 3 MB. The script (testdata/aisdk/chat.mjs) checks
// the messages the client ends with against the stored conversation; this
// test checks the approved note ran once.
func testBinaryAISDK(t *testing.T, bin string) {
	node, npm := nodePaths(t)
	dir, err := filepath.Abs(filepath.Join("testdata", "aisdk"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	ci := exec.CommandContext(ctx, npm, "ci", "--no-audit", "--no-fund", "--prefer-offline")
	ci.Dir = dir
	ci.Env = append(os.Environ(), "npm_config_update_notifier=false")
	if out, err := ci.CombinedOutput(); err != nil {
		t.Fatalf("npm ci in %s: %v\n%s", dir, err, out)
	}

	for _, v := range []string{"5", "6", "7"} {
		t.Run("ai"+v, func(t *testing.T) {
			data := filepath.Join(t.TempDir(), "data")
			httpAddr, natsAddr := agentdtest.FreeAddr(t), agentdtest.FreeAddr(t)
			p := &agentdProc{out: &agentdtest.SyncBuffer{}, exited: make(chan error, 1)}
			p.cmd = exec.Command(bin, "--data", data, "--http", httpAddr, "--nats-listen", natsAddr,
				"--log-format", "json", "--local-rate", "200")
			p.cmd.Env = os.Environ()
			p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
			p = startWith(t, p, httpAddr)

			// A bound for a hung script, not a timing: ai@7's flows take
			// about 16 s on a quiet machine (its long flow, 8 requests of
			// up to 3 MB, 9-10 s) and were killed at 45 s in a loaded CI run.
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, node, "chat.mjs", v)
			cmd.Dir = dir
			cmd.Env = append(os.Environ(), "AGENTD_URL=http://"+httpAddr)
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("node chat.mjs %s: %v\n%s\nagentd output:\n%s", v, err, out, p.out.String())
			}
			t.Logf("node chat.mjs %s:\n%s", v, out)
			for _, flow := range aisdkFlows[v] {
				if !strings.Contains(string(out), fmt.Sprintf("ok   ai@%s %s ", v, flow)) {
					t.Errorf("flow %s did not pass", flow)
				}
			}

			notes, err := os.ReadFile(filepath.Join(data, demo.NotesFile))
			if err != nil && !os.IsNotExist(err) {
				t.Fatal(err)
			}
			var lines []string
			if len(notes) > 0 {
				lines = strings.Split(strings.TrimSuffix(string(notes), "\n"), "\n")
			}
			want := 0
			if slices.Contains(aisdkFlows[v], "approval") {
				want = 1
			}
			if len(lines) != want {
				t.Errorf("%s has %d lines, want %d (the approved note, once):\n%s", demo.NotesFile, len(lines), want, notes)
			}
			for _, l := range lines {
				if !strings.HasSuffix(l, "\tplease approve") {
					t.Errorf("note line %q, want <call id>\\tplease approve", l)
				}
			}
		})
	}
}
