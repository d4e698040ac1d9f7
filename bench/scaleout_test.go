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
)

// TestProjectionCursors: the scale-out scenario reads every projection's
// cursor from a /metrics page, and counts a node's applied events by the
// runs projection only.
func TestProjectionCursors(t *testing.T) {
	page := "# HELP forever_eventlog_projection_cursor x\n" +
		"forever_eventlog_projection_cursor{projection=\"runs\"} 1200\n" +
		"forever_eventlog_projection_cursor{projection=\"chat\"} 1.5e+06\n" +
		"forever_eventlog_projection_lag_events{projection=\"runs\"} 3\n"
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
