package main

import (
	"bytes"
	"flag"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// TestHelpListsEveryCommand: agentd help, agentd -h and agentd help
// <command> list every subcommand runCLI handles, one line each, and a
// command's usage; an unknown command is a usage error naming it.
func TestHelpListsEveryCommand(t *testing.T) {
	var out, errb bytes.Buffer
	if code := runHelp(nil, &out, &errb); code != exitOK {
		t.Fatalf("agentd help: exit %d: %s", code, errb.String())
	}
	for _, c := range commands {
		if handled, _ := runCLI([]string{c.name, "-h"}, func(string) string { return "" }, &bytes.Buffer{}, &bytes.Buffer{}); !handled {
			t.Errorf("help lists %q, which runCLI does not handle", c.name)
		}
		if !strings.Contains(out.String(), "\n  "+c.name+" ") {
			t.Errorf("agentd help does not list %q:\n%s", c.name, out.String())
		}
		var cu bytes.Buffer
		if code := runHelp([]string{c.name}, &cu, &errb); code != exitOK || !strings.Contains(cu.String(), "Usage") {
			t.Errorf("agentd help %s: exit %d\n%s", c.name, code, cu.String())
		}
	}
	out.Reset()
	errb.Reset()
	if code := runHelp([]string{"nope"}, &out, &errb); code != exitUsage || !strings.Contains(errb.String(), `no command "nope"`) {
		t.Errorf("agentd help nope: exit %d, stderr %q", code, errb.String())
	}
}

// TestCLIServerFlag: the client commands take --server, --nats-url as its
// alias and $NATS_URL as the default, and never read FOREVER_NATS_URL,
// which is the daemon's external NATS.
func TestCLIServerFlag(t *testing.T) {
	env := map[string]string{"FOREVER_NATS_URL": "nats://daemon-only:4222", "NATS_URL": "nats://from-env:4222"}
	getenv := func(k string) string { return env[k] }
	for _, tt := range []struct {
		args []string
		want string
	}{
		{nil, "nats://from-env:4222"},
		{[]string{"--server", "nats://a:1"}, "nats://a:1"},
		{[]string{"--nats-url", "nats://b:2"}, "nats://b:2"},
	} {
		fs := newClientFlagSet()
		url, _, _ := clientFlags(fs, getenv)
		if err := fs.Parse(tt.args); err != nil {
			t.Fatal(err)
		}
		if *url != tt.want {
			t.Errorf("%q: url %q, want %q", tt.args, *url, tt.want)
		}
	}
	fs := newClientFlagSet()
	url, _, _ := clientFlags(fs, func(k string) string {
		if k == "FOREVER_NATS_URL" {
			return "nats://daemon-only:4222"
		}
		return ""
	})
	if *url != nats.DefaultURL {
		t.Errorf("with only FOREVER_NATS_URL set the CLI targets %q, want %q", *url, nats.DefaultURL)
	}
}

// TestConnectErrorNamesCredentials: against a server that requires
// credentials, a command without --creds is told to pass them, and one
// with wrong ones that they were refused; a server that is not there is
// asked about.
func TestConnectErrorNamesCredentials(t *testing.T) {
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, Username: "u", Password: "p", NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	t.Cleanup(s.Shutdown)
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("server not ready")
	}
	connect := func(opts ...nats.Option) error {
		nc, err := nats.Connect(s.ClientURL(), opts...)
		if err == nil {
			nc.Close()
			t.Fatal("connected")
		}
		return connectError(s.ClientURL(), opts, err)
	}
	if err := connect(); !strings.Contains(err.Error(), "requires credentials: pass --creds") {
		t.Errorf("no creds: %v", err)
	}
	if err := connect(nats.UserInfo("u", "wrong")); !strings.Contains(err.Error(), "refused the credentials") {
		t.Errorf("wrong creds: %v", err)
	}
	if err := connectError("nats://127.0.0.1:1", nil, nats.ErrNoServers); !strings.Contains(err.Error(), "is agentd running?") {
		t.Errorf("no server: %v", err)
	}
}

// TestLogTracing: the start-up line says whether tracing is on and where
// it exports, and never shows a header or a credential of the URL.
func TestLogTracing(t *testing.T) {
	for _, tt := range []struct {
		name string
		env  map[string]string
		want []string
	}{
		{"off", nil, []string{`level=DEBUG msg="tracing is off`}},
		{"otlp", map[string]string{
			"OTEL_EXPORTER_OTLP_ENDPOINT": "https://u:s3cret@collector:4318?k=s3cret",
			"OTEL_EXPORTER_OTLP_HEADERS":  "authorization=Bearer s3cret",
		}, []string{`level=INFO msg="tracing is on" exporter=otlp endpoint=https://collector:4318/v1/traces protocol=http/protobuf`}},
		{"console", map[string]string{"OTEL_TRACES_EXPORTER": "console"}, []string{`msg="tracing is on" exporter=console endpoint=stdout`}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			logTracing(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})), func(k string) string { return tt.env[k] })
			got := buf.String()
			if n := strings.Count(got, "\n"); n != 1 {
				t.Errorf("%d lines, want 1:\n%s", n, got)
			}
			for _, w := range tt.want {
				if !strings.Contains(got, w) {
					t.Errorf("log %q lacks %q", got, w)
				}
			}
			if strings.Contains(got, "s3cret") {
				t.Errorf("log shows a secret: %s", got)
			}
		})
	}
}

// TestHelpListsFlags: agentd help <command> lists every flag the command
// parses, read from its own flag set, so the two cannot drift.
func TestHelpListsFlags(t *testing.T) {
	for _, c := range commands {
		if c.flags == nil {
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			if code := runHelp([]string{c.name}, &out, &errb); code != exitOK {
				t.Fatalf("exit %d: %s", code, errb.String())
			}
			n := 0
			c.flags(func(string) string { return "" }).VisitAll(func(f *flag.Flag) {
				n++
				if !strings.Contains(out.String(), "\n  --"+f.Name+" ") {
					t.Errorf("agentd help %s does not list --%s:\n%s", c.name, f.Name, out.String())
				}
			})
			if n == 0 {
				t.Errorf("%s has a flag set without flags", c.name)
			}
		})
	}
	// chat's flags are those clientCommand parses: --wait among them.
	var out bytes.Buffer
	runHelp([]string{"chat"}, &out, &bytes.Buffer{})
	for _, want := range []string{"Flags of agentd chat:", "--wait duration", "--server url"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("agentd help chat lacks %q:\n%s", want, out.String())
		}
	}
}
