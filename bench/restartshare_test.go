package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
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
