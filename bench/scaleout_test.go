package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestProjectionCursors: the scale-out scenario reads every projection's
// cursor from a /metrics page, and counts a node's applied events by the
// runs projection only; a projection's lag is the highest of its shards'.
func TestProjectionCursors(t *testing.T) {
	page := "# HELP forever_eventlog_projection_cursor x\n" +
		"forever_eventlog_projection_cursor{projection=\"runs\"} 1200\n" +
		"forever_eventlog_projection_cursor{projection=\"chat\"} 1.5e+06\n" +
		"forever_eventlog_projection_lag_events{projection=\"runs\",stream=\"FOREVER_EVENTS_0\"} 0\n" +
		"forever_eventlog_projection_lag_events{projection=\"runs\",stream=\"FOREVER_EVENTS_1\"} 3\n" +
		"forever_eventlog_projection_lag_events{projection=\"runs\",stream=\"FOREVER_EVENTS_2\"} 1\n"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, page) }))
	defer srv.Close()
	cur, err := projectionCursors(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	if len(cur) != 3 || cur["runs"] != 1200 || cur["chat"] != 1.5e6 || cur["lag:runs"] != 3 {
		t.Fatalf("cursors = %v", cur)
	}
	before := nodeSnapshot{cursors: map[string]float64{"runs": 200, "chat": 1e6}}
	if got := (nodeSnapshot{cursors: cur}).applied(before); got != 1000 {
		t.Errorf("applied = %v, want the runs projection's 1000", got)
	}
	delete(cur, "runs")
	if got := (nodeSnapshot{cursors: cur}).applied(before); got != 0 {
		t.Errorf("applied without runs = %v, want 0 (the chat cursor is not the events stream's)", got)
	}
}

// TestCPUCgroups puts a real process in a cgroup v1 cpu cgroup with a quota,
// reads its CPU time, and removes the cgroup once the process is gone.
// Skipped where cgroup v1's cpu controller is not writable.
func TestCPUCgroups(t *testing.T) {
	if why := cpuCgroupsUnusable(); why != "" {
		t.Skip(why)
	}
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	g := &cpuCgroups{run: fmt.Sprintf("test-%d", os.Getpid()), quota: 0.25}
	if err := g.add("n0", cmd.Process.Pid); err != nil {
		cmd.Process.Kill()
		t.Fatal(err)
	}
	dir := g.dirs["n0"]
	quota, _ := os.ReadFile(filepath.Join(dir, "cpu.cfs_quota_us"))
	procs, _ := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if _, err := procTicks(cmd.Process.Pid); err != nil {
		t.Error(err)
	}
	cmd.Process.Kill()
	cmd.Wait()
	if strings.TrimSpace(string(quota)) != "25000" {
		t.Errorf("cpu.cfs_quota_us = %q, want 25000", quota)
	}
	if strings.TrimSpace(string(procs)) != fmt.Sprint(cmd.Process.Pid) {
		t.Errorf("cgroup.procs = %q, want %d", procs, cmd.Process.Pid)
	}
	if err := g.remove(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("cgroup %s still there: %v", dir, err)
	}
}

// TestLeadersSpread: the scale-out scenario measures a cluster once its
// shard streams' leaders are spread as GET /v1/cluster shows them; an
// unsharded cluster has nothing to wait for.
func TestLeadersSpread(t *testing.T) {
	var body string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, body) }))
	defer srv.Close()
	c := &agentdCluster{nodes: []*clusterNode{
		{name: "forever-0", httpAddr: strings.TrimPrefix(srv.URL, "http://")}, {name: "forever-1"}, {name: "forever-2"},
	}}
	streams := func(leaders ...string) string {
		var parts []string
		for i, l := range leaders {
			kind := "EVENTS"
			if i >= len(leaders)/2 {
				kind = "CHUNKS"
			}
			parts = append(parts, fmt.Sprintf(`{"name":"FOREVER_%s_%d","leader":%q}`, kind, i%(len(leaders)/2), l))
		}
		return `{"shards":2,"streams":[` + strings.Join(parts, ",") + `,{"name":"KV_FOREVER_LEASES","leader":"forever-0"}]}`
	}
	for _, tc := range []struct {
		name, body string
		want       bool
	}{
		{"unsharded", `{"streams":[{"name":"FOREVER_EVENTS","leader":"forever-0"}]}`, true},
		{"spread", streams("forever-0", "forever-1", "forever-2", "forever-0"), true},
		{"a node leads none", streams("forever-0", "forever-1", "forever-1", "forever-0"), false},
		{"bunched", streams("forever-0", "forever-0", "forever-0", "forever-0", "forever-0", "forever-1", "forever-2", "forever-0"), false},
		{"a stream without a leader", streams("forever-0", "forever-1", "forever-2", ""), false},
	} {
		body = tc.body
		got, what, err := leadersSpread(srv.Client(), c)
		if err != nil || got != tc.want {
			t.Errorf("%s: spread = %v (%s), %v; want %v", tc.name, got, what, err, tc.want)
		}
	}
}

// TestLastSpreadLogged: the scale-out scenario reads when the leaders'
// spread last stepped a leader down from the nodes' logs.
func TestLastSpreadLogged(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "agentd.log")
	c := &agentdCluster{nodes: []*clusterNode{{name: "forever-0", logPath: log}}}
	if got := lastSpreadLogged(c); !got.IsZero() {
		t.Fatalf("without a log: %v", got)
	}
	lines := "--- bench: start\n" +
		`{"time":"2026-11-30T02:35:25.044179081Z","level":"INFO","msg":"` + spreadLogged + `","stream":"FOREVER_EVENTS_2"}` + "\n" +
		`{"time":"2026-11-30T02:35:30.5Z","level":"INFO","msg":"` + spreadLogged + `","stream":"FOREVER_CHUNKS_6"}` + "\n" +
		`{"time":"2026-11-30T02:36:00Z","level":"INFO","msg":"something else"}` + "\n"
	if err := os.WriteFile(log, []byte(lines), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := lastSpreadLogged(c); !got.Equal(time.Date(2026, 11, 30, 2, 35, 30, 5e8, time.UTC)) {
		t.Fatalf("last spread = %v, want 02:35:30.5", got)
	}
}
