package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/micro"

	"github.com/forever-agents/forever/agentd/agentdtest"
	"github.com/forever-agents/forever/agentd/host"
	"github.com/forever-agents/forever/chat/chunk"
	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/eventlog/eventlogtest"
	"github.com/forever-agents/forever/internal/apierror"
)

// fakeAgentd answers fibers, status and chat like agentd's micro service,
// on a real embedded server; chat writes a short reply to the chunks
// stream through a real Batcher.
func fakeAgentd(t *testing.T) string {
	t.Helper()
	s := eventlogtest.RunServer(t, eventlogtest.ServerOptions{})
	nc := eventlogtest.Connect(t, s)
	lg := eventlogtest.OpenOn(t, s, eventlog.Config{Conn: nc})
	b := lg.NewBatcher(eventlog.BatcherConfig{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	svc, err := micro.AddService(nc, micro.Config{Name: "forever", Version: "0.1.0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Stop() })
	add := func(verb string, h func(agent string, req micro.Request)) {
		err := svc.AddEndpoint(verb, micro.HandlerFunc(func(req micro.Request) {
			tokens := strings.Split(req.Subject(), ".")
			agent := tokens[2]
			if agent == "ghost" {
				req.Error("404", "agentd: unknown agent ghost", nil)
				return
			}
			h(agent, req)
		}), micro.WithEndpointSubject("forever.cmd.*."+verb))
		if err != nil {
			t.Fatal(err)
		}
	}
	add("fibers", func(agent string, req micro.Request) {
		req.RespondJSON([]host.FiberInfo{
			{ID: "f1", Name: "turn-r1", Attempt: 1, Recoveries: 1, CreatedAt: "2025-01-01T00:00:00.000Z"},
			{ID: "fiber-long-id-2", Name: "x", Attempt: 12, Recoveries: 11, CreatedAt: "2025-01-01T00:00:01.000Z"},
		})
	})
	add("status", func(agent string, req micro.Request) {
		req.RespondJSON(host.Status{Agent: agent, Type: "chat", Active: true, Fibers: 2, Schedules: 1})
	})
	add("chat", func(agent string, req micro.Request) {
		var in struct{ Text string }
		json.Unmarshal(req.Data(), &in)
		req.RespondJSON(map[string]any{"requestId": "r1", "streamId": "s1", "cursor": 0})
		go func() {
			w := chunk.NewWriter(b, agent, "s1", 0, lg.MaxPayload())
			chunks := []chunk.Chunk{
				{Type: chunk.Start, MessageID: "m1"},
				{Type: chunk.TextStart, ID: "t"},
				{Type: chunk.TextDelta, ID: "t", Delta: "echo: "},
				{Type: chunk.TextDelta, ID: "t", Delta: in.Text},
				{Type: chunk.TextEnd, ID: "t"},
				{Type: chunk.Finish},
			}
			if agent == "slow" {
				chunks = chunks[:3] // a turn that is still running
			}
			for _, c := range chunks {
				time.Sleep(time.Millisecond) // not a synchronisation: the fake's pace
				w.Write(context.Background(), c)
			}
			w.Flush(context.Background())
		}()
	})
	// The endpoints' subscriptions are in the client's buffer until it
	// flushes: a CLI command sent at once would get "no responders".
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return s.ClientURL()
}

func cli(t *testing.T, url string, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	getenv := func(k string) string {
		if k == "NATS_URL" {
			return url
		}
		return ""
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	code := runCLIContext(ctx, args, getenv, &out, &errb)
	return code, out.String(), errb.String()
}

func TestCLI(t *testing.T) {
	url := fakeAgentd(t)
	tests := []struct {
		name        string
		args        []string
		code        int
		out, errOut string
	}{
		{"fibers table", []string{"fibers", "a1"}, 0,
			"ID               NAME     ATTEMPT  CREATED\n" +
				"f1               turn-r1  2        2025-01-01T00:00:00.000Z\n" +
				"fiber-long-id-2  x        12       2025-01-01T00:00:01.000Z\n", ""},
		{"status", []string{"status", "a1"}, 0,
			"agent      a1\ntype       chat\nactive     true\nfibers     2\nschedules  1\nkeepalive  0\n", ""},
		{"chat", []string{"chat", "a1", "hello there"}, 0, "echo: hello there\n", ""},
		{"tail from start", []string{"tail", "--from", "0", "a1"}, 0, "echo: hello there\n", ""},
		{"service error", []string{"fibers", "ghost"}, 1, "", "404: agentd: unknown agent ghost"},
		{"missing agent", []string{"status"}, 2, "", "missing agent id"},
		{"missing text", []string{"chat", "a1"}, 2, "", "missing message text"},
		{"extra arg", []string{"fibers", "a1", "b"}, 2, "", `unexpected argument "b"`},
		{"bad agent", []string{"fibers", "a.b"}, 2, "", "is not a valid agent id"},
		{"long agent", []string{"fibers", strings.Repeat("a", 300)}, 2, "", "is 300 bytes, over the limit of 256"},
		{"bad cursor", []string{"tail", "a1", "--from", "abc"}, 2, "", `--from "abc" is not a cursor`},
		{"unknown flag", []string{"status", "--nope", "a1"}, 2, "", "agentd status: unknown flag --nope\nrun 'agentd help status' for its usage\n"},
		{"no responders", []string{"status", "a1", "--nats-url", eventlogtest.RunServer(t, eventlogtest.ServerOptions{}).ClientURL()}, 1, "", "no agentd answers on forever.cmd.a1.status"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errOut := cli(t, url, tt.args...)
			if code != tt.code || !strings.Contains(out, tt.out) || !strings.Contains(errOut, tt.errOut) {
				t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s\nwant exit %d, stdout containing %q, stderr containing %q", code, out, errOut, tt.code, tt.out, tt.errOut)
			}
			if tt.name == "fibers table" && out != tt.out {
				t.Fatalf("table:\n%s\nwant:\n%s", out, tt.out)
			}
		})
	}
}

// An interrupted chat prints the cursor to resume from and exits 130; it
// does not stop the turn (the CLI sends nothing but the chat command).
func TestCLIInterruptPrintsCursor(t *testing.T) {
	url := fakeAgentd(t)
	out, errb := &agentdtest.SyncBuffer{}, &agentdtest.SyncBuffer{}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go func() {
		for !strings.Contains(out.String(), "echo: ") {
			time.Sleep(5 * time.Millisecond) // not a synchronisation: the interval of a poll on the chat's first output (in a goroutine, no t.Fatal)
		}
		cancel()
	}()
	code := runCLIContext(ctx, []string{"chat", "slow", "x", "--nats-url", url}, func(string) string { return "" }, out, errb)
	if code != exitInterrupted || !strings.Contains(errb.String(), "cursor: ") {
		t.Fatalf("exit %d, stderr %q", code, errb.String())
	}
	if strings.Contains(errb.String(), "cursor: 0\n") {
		t.Fatalf("cursor not advanced: %q", errb.String())
	}
}

// TestUsageErrors: a usage error is one line naming what is wrong, then a
// line saying where the usage is; never the whole usage page, never Go's
// flag wording.
func TestUsageErrors(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"frob"}, "agentd: unknown command \"frob\" (run 'agentd help' for the commands)\n"},
		{[]string{"--bogus"}, "agentd: unknown flag --bogus (run 'agentd -h' for the flags)\n"},
		{[]string{"-bogus"}, "agentd: unknown flag --bogus (run 'agentd -h' for the flags)\n"},
		{[]string{"--data", "x", "frob"}, "agentd: unexpected argument \"frob\": the daemon takes flags only (run 'agentd help' for the commands)\n"},
		{[]string{"status"}, "agentd status: missing agent id\nrun 'agentd help status' for its usage\n"},
		{[]string{"tail", "a1", "--from", "x"}, "agentd tail: --from \"x\" is not a cursor: " + apierror.CursorRule + "\nrun 'agentd help tail' for its usage\n"},
		{[]string{"verify", "--nope"}, "agentd verify: unknown flag --nope\nrun 'agentd help verify' for its usage\n"},
		{[]string{"agents", "--nope"}, "agentd agents: unknown flag --nope\nrun 'agentd help agents' for its usage\n"},
	} {
		var errb strings.Builder
		code := run(tt.args, func(string) string { return "" }, &errb)
		if code != exitUsage || errb.String() != tt.want {
			t.Errorf("agentd %s: exit %d\n%s\nwant exit %d\n%s", strings.Join(tt.args, " "), code, errb.String(), exitUsage, tt.want)
		}
	}
}

func TestRunCLINotHandled(t *testing.T) {
	for _, args := range [][]string{nil, {"--data", "x"}, {"serve"}} {
		if handled, _ := runCLI(args, func(string) string { return "" }, nil, nil); handled {
			t.Fatalf("runCLI(%q) handled", args)
		}
	}
}
