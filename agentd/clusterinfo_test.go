package agentd_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/forever-agents/forever/agentd"
	"github.com/forever-agents/forever/agentd/agentdtest"
	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/internal/waitfor"
)

// TestClusterInfo: GET /v1/cluster on a single node shows the node live
// with every partition, each lease with its epoch, the streams with
// string sequences, and the store's use.
func TestClusterInfo(t *testing.T) {
	cfg := agentdtest.Config(t)
	d, err := agentd.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	agentdtest.Start(t, d)
	parts := d.Config().Partitions
	var info agentd.ClusterInfo
	var body string
	// The node takes its leases a few at a time.
	waitfor.True(t, "the node to hold every lease", func() bool {
		var code int
		code, body = agentdtest.Get(t, "http://"+d.HTTPAddr()+"/v1/cluster")
		if code != http.StatusOK {
			t.Fatalf("GET /v1/cluster: %d %s", code, body)
		}
		if err := json.Unmarshal([]byte(body), &info); err != nil {
			t.Fatal(err)
		}
		return len(info.Leases) >= parts
	})
	cfg = d.Config()
	if info.Node != cfg.ServerName || info.Partitions != parts || len(info.Leases) != parts {
		t.Fatalf("node %q, %d partitions, %d leases; want %q, %d, all held", info.Node, info.Partitions, len(info.Leases), cfg.ServerName, parts)
	}
	if len(info.Nodes) != 1 || !info.Nodes[0].Live || info.Nodes[0].Owns != parts {
		t.Errorf("nodes = %+v, want this node live owning every partition", info.Nodes)
	}
	for _, l := range info.Leases {
		if l.Node != cfg.ServerName || l.Epoch == 0 {
			t.Errorf("lease %+v, want held by %s with an epoch", l, cfg.ServerName)
		}
	}
	if len(info.Streams) != 3 || info.Streams[0].Name != eventlog.DefaultEventsStream || info.Streams[0].Error != "" {
		t.Errorf("streams = %+v", info.Streams)
	}
	if !strings.Contains(body, `"lastSeq":"`) {
		t.Errorf("sequences are not strings: %s", body)
	}
	if info.Store.ViewsBytes <= 0 || info.Store.JetStream.Streams < 2 || info.Store.JetStream.Error != "" {
		t.Errorf("store = %+v", info.Store)
	}
	if f := info.Format; f == nil || f.Active != agentd.RecordFormat || f.Reads != agentd.RecordFormat || f.Nodes[cfg.ServerName] != agentd.RecordFormat {
		t.Errorf("format = %+v, want format %d active and read by this node", f, agentd.RecordFormat)
	}
}
