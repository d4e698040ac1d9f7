package main

import (
	"bytes"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/forever-agents/forever/agentd"
	"github.com/forever-agents/forever/agentd/agentdtest"
)

// TestAgentsCLI: agentd agents lists the agents of a daemon wired as the
// binary wires it, filtered by user, tag and type; agentd delete deletes
// one, which then leaves the listing; bad arguments are usage errors.
func TestAgentsCLI(t *testing.T) {
	cfg := agentdtest.Config(t)
	cfg.Provider = "local"
	d, err := agentd.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := wire(d); err != nil {
		t.Fatal(err)
	}
	agentdtest.Start(t, d)
	agentdtest.WaitStatus(t, "http://"+d.HTTPAddr()+"/readyz", 200)
	nc, err := nats.Connect(d.NATSURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	for _, c := range []struct{ agent, data string }{
		{"steps:a", `{"steps":1,"delayMs":0,"meta":{"user":"ann","tags":["night"]}}`},
		{"steps:b", `{"steps":1,"delayMs":0,"meta":{"user":"bob"}}`},
	} {
		if m, err := nc.Request("forever.cmd."+c.agent+".start", []byte(c.data), 10*time.Second); err != nil || m.Header.Get("Nats-Service-Error-Code") != "" {
			t.Fatalf("start %s: %v %s", c.agent, err, m.Data)
		}
	}
	if m, err := nc.Request("forever.cmd.c1.meta", []byte(`{"user":"ann","tags":["day"]}`), 10*time.Second); err != nil || m.Header.Get("Nats-Service-Error-Code") != "" {
		t.Fatalf("meta c1: %v %s", err, m.Data)
	}
	cli := func(args ...string) (int, string, string) {
		t.Helper()
		var out, errb bytes.Buffer
		getenv := func(k string) string {
			if k == "NATS_URL" {
				return d.NATSURL()
			}
			return ""
		}
		handled, code := runCLI(args, getenv, &out, &errb)
		if !handled {
			t.Fatalf("%v not handled", args)
		}
		return code, out.String(), errb.String()
	}
	agentsOf := func(out string) []string {
		var ids []string
		for _, line := range strings.Split(strings.TrimSpace(out), "\n")[1:] {
			ids = append(ids, strings.Fields(line)[0])
		}
		return ids
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"agents"}, "c1 steps:a steps:b"},
		{[]string{"agents", "--user", "ann"}, "c1 steps:a"},
		{[]string{"agents", "--tag", "night"}, "steps:a"},
		{[]string{"agents", "--type", "chat"}, "c1"},
		{[]string{"agents", "--type", "steps", "--limit", "1"}, "steps:a"},
	} {
		code, out, errs := cli(tc.args...)
		if code != 0 || strings.Join(agentsOf(out), " ") != tc.want {
			t.Fatalf("%v: exit %d\n%s%s\nwant %s", tc.args, code, out, errs, tc.want)
		}
	}
	if _, out, _ := cli("agents", "--user", "ann"); !strings.Contains(out, "AGENT") || !strings.Contains(out, "night") || !strings.Contains(out, "idle") {
		t.Fatalf("agents table:\n%s", out)
	}
	if code, out, errs := cli("delete", "steps:a"); code != 0 || !strings.Contains(out, "steps:a: deleted") {
		t.Fatalf("delete: exit %d %s %s", code, out, errs)
	}
	if code, out, _ := cli("agents", "--user", "ann"); code != 0 || strings.Join(agentsOf(out), " ") != "c1" {
		t.Fatalf("after delete: %s", out)
	}
	if code, out, _ := cli("delete", "steps:a"); code != 0 || !strings.Contains(out, "already deleted") {
		t.Fatalf("second delete: %d %s", code, out)
	}
	if code, out, _ := cli("agents", "--user", "nobody"); code != 0 || strings.TrimSpace(out) != "no agents" {
		t.Fatalf("empty listing: %d %q", code, out)
	}
	// agentd cluster: the node, its partitions and the record format.
	if code, out, errs := cli("cluster"); code != 0 || !strings.Contains(out, "answered by "+d.Config().ServerName) ||
		!strings.Contains(out, fmt.Sprintf("record format %d active", agentd.RecordFormat)) || !strings.Contains(out, "FOREVER_EVENTS") || !strings.Contains(out, "READS FORMAT") {
		t.Fatalf("cluster: exit %d\n%s%s", code, out, errs)
	}
	if code, out, _ := cli("cluster", "--json"); code != 0 || !strings.Contains(out, fmt.Sprintf(`"format":{"active":%d`, agentd.RecordFormat)) {
		t.Fatalf("cluster --json: exit %d %s", code, out)
	}
	for _, tc := range []struct {
		args     []string
		code     int
		contains string
	}{
		{[]string{"cluster", "x"}, 2, "unexpected argument"},
		{[]string{"delete", "steps:ghost"}, 1, "404"},
		{[]string{"delete"}, 2, "missing agent id"},
		{[]string{"delete", "a", "b"}, 2, "unexpected argument"},
		{[]string{"delete", "a.b"}, 2, "is not a valid agent id"},
		{[]string{"agents", "x"}, 2, "unexpected argument"},
		{[]string{"agents", "--limit", "-1"}, 2, "--limit"},
		{[]string{"agents", "--bogus"}, 2, "bogus"},
	} {
		code, _, errs := cli(tc.args...)
		if code != tc.code || !strings.Contains(errs, tc.contains) {
			t.Errorf("%v: exit %d %q, want %d containing %q", tc.args, code, errs, tc.code, tc.contains)
		}
	}
}

// TestClusterCLIAdmin: under auth, agentd cluster with the admin's
// credential is answered with the node's view (in the service account no
// host serves the cluster subject; the admin service does).
func TestClusterCLIAdmin(t *testing.T) {
	cfg := agentdtest.Config(t)
	cfg.Provider = "local"
	cfg.Auth = true
	cfg.MetricsListen = "127.0.0.1:0"
	d, err := agentd.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	mcpc, err := wireTenants(d)
	if mcpc != nil {
		t.Cleanup(func() { mcpc.Close() })
	}
	if err != nil {
		t.Fatal(err)
	}
	agentdtest.Start(t, d)
	agentdtest.WaitStatus(t, "http://"+d.HTTPAddr()+"/readyz", 200)
	var out, errb bytes.Buffer
	getenv := func(k string) string {
		switch k {
		case "NATS_URL":
			return d.NATSURL()
		case "FOREVER_CREDS":
			return filepath.Join(cfg.DataDir, agentd.AdminCredsFile)
		}
		return ""
	}
	handled, code := runCLI([]string{"cluster"}, getenv, &out, &errb)
	if !handled || code != 0 || !strings.Contains(out.String(), "answered by "+d.Config().ServerName) {
		t.Fatalf("cluster with the admin's creds: exit %d\n%s%s", code, out.String(), errb.String())
	}
}
