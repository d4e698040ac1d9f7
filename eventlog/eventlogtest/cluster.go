package eventlogtest

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"testing"
	"time"

	"github.com/forever-agents/forever/internal/freeport"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
)

// RunCluster starts n embedded nats-servers with JetStream clustered on
// loopback (named s0, s1 ...), each storing under its own temp dir, and
// waits until JetStream has a meta leader that can place a stream on all
// of them. Each is shut down when the test
// ends; a test may shut one down before, to lose a node.
func RunCluster(t testing.TB, n int) []*server.Server {
	t.Helper()
	ports := make([]int, n)
	var routes []*url.URL
	for i := range ports {
		port, release, err := freeport.ReservePort()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(release)
		ports[i] = port
		routes = append(routes, &url.URL{Scheme: "nats", Host: fmt.Sprintf("127.0.0.1:%d", ports[i])})
	}
	dir := t.TempDir()
	out := make([]*server.Server, n)
	for i := range n {
		out[i] = startClusterServer(t, fmt.Sprintf("s%d", i), filepath.Join(dir, fmt.Sprintf("s%d", i)), -1, ports[i], routes)
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, s := range out {
		if !s.ReadyForConnections(10 * time.Second) {
			t.Fatal("nats server not ready")
		}
		for !s.JetStreamIsClustered() || !s.JetStreamIsCurrent() {
			if time.Now().After(deadline) {
				t.Fatal("no JetStream meta leader after 30s")
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	// The meta leader places an R-n stream only on peers whose stats it
	// has received: wait until it lists every server, or a stream created
	// at once finds "no suitable peers for placement".
	for !placeable(out) {
		if time.Now().After(deadline) {
			t.Fatalf("the JetStream meta leader does not list %d peers after 30s", n)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return out
}

// startClusterServer starts one server of RunCluster's, its clients'
// port clientPort (-1: any) and its cluster's port, shut down when the
// test ends.
func startClusterServer(t testing.TB, name, dir string, clientPort, port int, routes []*url.URL) *server.Server {
	t.Helper()
	s, err := server.NewServer(&server.Options{
		ServerName:         name,
		Host:               "127.0.0.1",
		Port:               clientPort,
		JetStream:          true,
		StoreDir:           dir,
		JetStreamMaxMemory: 64 << 20,
		JetStreamMaxStore:  1 << 30,
		Cluster:            server.ClusterOpts{Name: "test", Host: "127.0.0.1", Port: port},
		Routes:             routes,
		NoLog:              true,
		NoSigs:             true,
	})
	if err != nil {
		t.Fatalf("nats server: %v", err)
	}
	s.Start()
	t.Cleanup(func() {
		s.Shutdown()
		s.WaitForShutdown()
	})
	return s
}

// StopServer shuts down srvs[i], a server of RunCluster's, as a node
// that is lost, and returns what starts it again: the same name, store
// and cluster port, routed to every server. The restarted server is in
// srvs[i] once restart returns, ready for connections.
func StopServer(t testing.TB, srvs []*server.Server, i int) (restart func()) {
	t.Helper()
	r := StopServers(t, srvs, i)
	return func() { t.Helper(); r(i) }
}

// StopServers is StopServer of several servers at once (all of them, for
// a cluster that restarts): restart(i) starts srvs[i] again, routed to
// every server of the cluster, as StopServer's restart does, on its
// clients' port of before, so a connection to it reconnects.
func StopServers(t testing.TB, srvs []*server.Server, which ...int) (restart func(i int)) {
	t.Helper()
	var routes []*url.URL
	names, dirs := make([]string, len(srvs)), make([]string, len(srvs))
	ports, clientPorts := make([]int, len(srvs)), make([]int, len(srvs))
	for i, o := range srvs {
		if o.ClusterAddr() == nil {
			continue // stopped before: it routes to these once it is back
		}
		names[i], dirs[i] = o.Name(), filepath.Dir(o.StoreDir()) // StoreDir ends in the server's "jetstream"
		ports[i], clientPorts[i] = o.ClusterAddr().Port, o.Addr().(*net.TCPAddr).Port
		routes = append(routes, &url.URL{Scheme: "nats", Host: fmt.Sprintf("127.0.0.1:%d", ports[i])})
	}
	for _, i := range which {
		srvs[i].Shutdown()
		srvs[i].WaitForShutdown()
	}
	return func(i int) {
		t.Helper()
		srvs[i] = startClusterServer(t, names[i], dirs[i], clientPorts[i], ports[i], routes)
		if !srvs[i].ReadyForConnections(10 * time.Second) {
			t.Fatal("restarted nats server not ready")
		}
	}
}

// placeable reports whether the meta leader among servers lists all of
// them as peers with current stats.
func placeable(servers []*server.Server) bool {
	for _, s := range servers {
		if s.JetStreamIsLeader() {
			return len(s.JetStreamClusterPeers()) == len(servers)
		}
	}
	return false
}

// ConsumerServers names the servers that hold the consumers of stream, as
// the stream's consumer infos say (each consumer's Raft leader).
func ConsumerServers(t testing.TB, js jetstream.JetStream, stream string) []string {
	t.Helper()
	st, err := js.Stream(context.Background(), stream)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for ci := range st.ListConsumers(context.Background()).Info() {
		if ci.Cluster != nil {
			out = append(out, ci.Cluster.Leader)
		}
	}
	return out
}
