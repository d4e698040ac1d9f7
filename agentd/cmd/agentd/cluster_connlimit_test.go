package main

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/forever-agents/forever/agentd"
)

// testClusterConnLimitAfterKill checks that a node SIGKILLed and started
// again leaves no connections of its own counted against a tenant's
// connection limit (--max-conns) on the other servers. Without the
// restarted node's word that its previous server is gone, the others
// count that server's connections for 150 to 240 s: the tenant, filled
// to one below its limit, is then over it once the restarted node opens
// agentd's own connections again, and the servers close its
// connections (all five of the test's, without the word) and refuse a
// new one.
func testClusterConnLimitAfterKill(t *testing.T, bin string, nodes []*clusterNode) {
	out := t.TempDir()
	admin := filepath.Join(nodes[0].data, agentd.AdminCredsFile)
	tight := createTenant(t, bin, "nats://"+nodes[0].nats, admin, out, "tight", "--max-conns", "12")
	waitReady(t, nodes...)

	connect := func() (*nats.Conn, error) {
		return nats.Connect("nats://"+nodes[0].nats, nats.UserCredentials(tight.Creds), nats.NoReconnect())
	}
	// Fill the tenant to its limit (agentd's own connections, two a node,
	// take part of it), then leave one place.
	var clients []*nats.Conn
	defer func() {
		for _, nc := range clients {
			nc.Close()
		}
	}()
	for {
		nc, err := connect()
		if err != nil {
			if !strings.Contains(err.Error(), "maximum account active connections exceeded") {
				t.Fatalf("client %d of tenant tight: %v", len(clients), err)
			}
			break
		}
		clients = append(clients, nc)
		if len(clients) > 12 {
			t.Fatal("tenant tight took more connections than its limit")
		}
	}
	if len(clients) == 0 {
		t.Fatal("tenant tight took no client connection")
	}
	clients[len(clients)-1].Close()
	clients = clients[:len(clients)-1]

	// lost lists the clients the servers closed.
	lost := func() []string {
		var l []string
		for i, nc := range clients {
			if !nc.IsConnected() {
				l = append(l, fmt.Sprintf("client %d: %v", i, nc.LastError()))
			}
		}
		return l
	}
	victim := nodes[2]
	victim.proc.kill()
	victim.start(t, bin)
	waitReady(t, victim) // its tenants served: agentd's own connections to tight open again

	if l := lost(); len(l) > 0 {
		t.Fatalf("after %s's restart, tenant tight's connections were closed: %v", victim.name, l)
	}
	// The restarted node's own connections reach the other servers'
	// counts a moment after it is ready: until then node 0 may take one
	// connection too many (and close it when the count comes). So this
	// probes until the limit holds exactly: one more connection taken,
	// the next refused. Without the restarted node's word, the one more
	// is refused for minutes.
	var err error
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(300 * time.Millisecond) { // not a synchronisation: the interval of a probe while the counts settle
		var one, over *nats.Conn
		if one, err = connect(); err == nil {
			over, err = connect()
			one.Close()
			if err != nil {
				break // exact
			}
			over.Close()
			err = errors.New("a connection over the limit was taken")
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s's restart, tenant tight at one below its limit: %v", victim.name, err)
		}
	}
	if !strings.Contains(err.Error(), "maximum account active connections exceeded") {
		t.Fatalf("the connection over tenant tight's limit: %v", err)
	}
}
