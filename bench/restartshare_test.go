package main

import (
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestMetricValues: restart-share reads the partitions a node owns and
// those it recovered from its /metrics page, by exact name (a name that
// only starts like one asked for, and labelled series, are not it).
func TestMetricValues(t *testing.T) {
	page := "# HELP forever_agentd_partitions_recovered x\n" +
		"forever_agentd_partitions_recovered 7\n" +
		"forever_agentd_partitions_recovered_total 99\n" +
		"forever_ownership_partitions_owned 9\n" +
		"forever_eventlog_projection_cursor{projection=\"runs\"} 1200\n"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, page) }))
	defer srv.Close()
	got, err := metricValues(srv.URL, recoveredMetric, ownedMetric)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[recoveredMetric] != 7 || got[ownedMetric] != 9 {
		t.Fatalf("metricValues = %v, want recovered 7 and owned 9", got)
	}
}

// TestBeyondFixed: the rows of a restart's part beyond the same node's
// restart before the history judge that part, 6 nodes against 3; a part
// at or below zero at 6 nodes is 1 ms, and a 3-node part within the polls'
// resolution gets no verdict.
func TestBeyondFixed(t *testing.T) {
	for _, tc := range []struct {
		name           string
		m3, e3, m6, e6 float64
		value, base    float64
		judged, pass   bool
	}{
		{"half the history", 3000, 1000, 1900, 1000, 900, 2000, true, true},
		{"the same part", 3000, 1000, 3000, 1000, 2000, 2000, true, false},
		{"none at 6 nodes", 3000, 1000, 900, 1000, 1, 2000, true, true},
		{"within the polls at 3 nodes", 1100, 1000, 1000, 1000, 1, 100, false, false},
	} {
		r := beyondFixed("rebuild", "time", tc.m3, tc.e3, tc.m6, tc.e6)
		pass, judged := r.Pass()
		if r.Value != tc.value || r.BaselineValue != tc.base || judged != tc.judged || pass != tc.pass {
			t.Errorf("%s: value %v base %v judged %v pass %v, want %v %v %v %v", tc.name, r.Value, r.BaselineValue, judged, pass, tc.value, tc.base, tc.judged, tc.pass)
		}
	}
}

// TestRestartShareQuota: -cpu-quota below 0 runs restart-share's nodes
// without a quota and the rows say so; zero takes scale-out's default;
// where cgroups cannot be written here the nodes run unheld and the rows
// say why.
func TestRestartShareQuota(t *testing.T) {
	env := &Env{Logger: slog.New(slog.DiscardHandler)}
	env.cfg.CPUQuota = -1
	if q, note := restartShareQuota(env); q != 0 || !strings.Contains(note, "below 0") {
		t.Errorf("-cpu-quota -1: got %v, %q; want 0 and a note naming the flag", q, note)
	}
	env.cfg.CPUQuota = 0
	q, note := restartShareQuota(env)
	if why := cpuCgroupsUnusable(); why != "" {
		if q != 0 || !strings.Contains(note, why) {
			t.Errorf("no cgroups (%s): got %v, %q; want 0 and the reason", why, q, note)
		}
		return
	}
	if q != scaleOutQuota || note != fmt.Sprintf("each node held to %.2f CPU", scaleOutQuota) {
		t.Errorf("-cpu-quota 0: got %v, %q; want the default %v", q, note, scaleOutQuota)
	}
}
