package tenancy_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/forever-agents/forever/agentd"
	"github.com/forever-agents/forever/agentd/host"
)

// Under auth the admin credential's request for the cluster's view
// (forever.cluster, agentd cluster) is answered with the node's view, as
// the admin token's GET /v1/cluster is.
func TestAdminClusterView(t *testing.T) {
	n := startNode(t)
	m, err := n.admin.Request(host.ClusterSubject("forever"), nil, 30*time.Second)
	if err != nil {
		t.Fatalf("the admin's cluster request: %v", err)
	}
	if code := m.Header.Get("Nats-Service-Error-Code"); code != "" {
		t.Fatalf("the admin's cluster request: %s %s", code, m.Header.Get("Nats-Service-Error"))
	}
	var info agentd.ClusterInfo
	if err := json.Unmarshal(m.Data, &info); err != nil || info.Node != n.d.Config().ServerName || len(info.Streams) == 0 {
		t.Fatalf("the admin's cluster view: %v %s", err, m.Data)
	}
}
