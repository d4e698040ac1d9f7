package freeport

import (
	"net"
	"strconv"
	"testing"
)

// TestReserveHoldsThePort: a reserved port is below the ephemeral range,
// a server can listen on it, and no other reservation gets it while held.
func TestReserveHoldsThePort(t *testing.T) {
	held := map[string]bool{}
	var releases []func()
	defer func() {
		for _, r := range releases {
			r()
		}
	}()
	for range 100 {
		addr, release, err := Reserve()
		if err != nil {
			t.Fatal(err)
		}
		releases = append(releases, release)
		if held[addr] {
			t.Fatalf("%s handed out twice while reserved", addr)
		}
		held[addr] = true
		_, p, _ := net.SplitHostPort(addr)
		if port, _ := strconv.Atoi(p); port < lowest || port >= ephemeralStart() {
			t.Fatalf("port %d outside [%d, %d)", port, lowest, ephemeralStart())
		}
	}
	for addr := range held {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatalf("a server cannot listen on reserved %s: %v", addr, err)
		}
		ln.Close()
	}
}

// TestReleaseFreesThePort: after release, the port's UDP mark is gone.
func TestReleaseFreesThePort(t *testing.T) {
	addr, release, err := Reserve()
	if err != nil {
		t.Fatal(err)
	}
	if c, err := net.ListenPacket("udp", addr); err == nil {
		c.Close()
		t.Fatalf("%s not marked while reserved", addr)
	}
	release()
	c, err := net.ListenPacket("udp", addr)
	if err != nil {
		t.Fatalf("%s still marked after release: %v", addr, err)
	}
	c.Close()
}
