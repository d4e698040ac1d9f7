package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
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
	ms := func(xs ...int) []time.Duration {
		out := make([]time.Duration, len(xs))
		for i, x := range xs {
			out[i] = time.Duration(x) * time.Millisecond
		}
		return out
	}
	for _, tc := range []struct {
		name           string
		m3, e3, m6, e6 []time.Duration
		value, base    float64
		judged, pass   bool
	}{
		{"half the history", ms(3000, 3200), ms(1000, 1100), ms(1900, 2000), ms(1000, 1050), 900, 2000, true, true},
		{"the same part", ms(3000), ms(1000), ms(3000), ms(1000), 2000, 2000, true, false},
		{"none at 6 nodes", ms(3000), ms(1000), ms(900), ms(1000), 1, 2000, true, true},
		{"within the polls at 3 nodes", ms(1100), ms(1000), ms(1000), ms(1000), 1, 100, false, false},
	} {
		r := beyondFixed("rebuild", "time", tc.m3, tc.e3, tc.m6, tc.e6)
		pass, judged := r.Pass()
		if r.Value != tc.value || r.BaselineValue != tc.base || judged != tc.judged || pass != tc.pass {
			t.Errorf("%s: value %v base %v judged %v pass %v, want %v %v %v %v", tc.name, r.Value, r.BaselineValue, judged, pass, tc.value, tc.base, tc.judged, tc.pass)
		}
	}
	if got := durations([]float64{1.5, 20}); got[0] != 1500*time.Microsecond || got[1] != 20*time.Millisecond {
		t.Errorf("durations = %v", got)
	}
}
