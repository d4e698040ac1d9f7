package freeport

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
)

// lowest is the first port Reserve picks from; below it live the well-known
// and registered services a machine may run.
const lowest = 16384

// defaultEphemeral is where the ephemeral range starts when the kernel does
// not say (Linux's default; macOS's starts higher, at 49152).
const defaultEphemeral = 32768

// attempts bounds the picks before Reserve gives up.
const attempts = 200

// Reserve returns a 127.0.0.1 address whose port is free and stays out of
// every other Reserve's hands until release is called.
func Reserve() (addr string, release func(), err error) {
	port, release, err := ReservePort()
	if err != nil {
		return "", nil, err
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), release, nil
}

// ReservePort is Reserve for a caller that needs the port number (a
// nats-server's cluster port).
func ReservePort() (port int, release func(), err error) {
	hi := ephemeralStart()
	if hi <= lowest {
		return 0, nil, fmt.Errorf("freeport: the ephemeral range starts at %d, below %d", hi, lowest)
	}
	for range attempts {
		port := lowest + rand.IntN(hi-lowest)
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		mark, err := net.ListenPacket("udp", addr)
		if err != nil {
			continue // reserved by another Reserve, or used
		}
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			mark.Close()
			continue
		}
		ln.Close()
		return port, func() { mark.Close() }, nil
	}
	return 0, nil, errors.New("freeport: no free port found below the ephemeral range")
}

// ephemeralStart is the first port of the kernel's ephemeral range.
func ephemeralStart() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return defaultEphemeral
	}
	first, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\t")
	n, err := strconv.Atoi(strings.TrimSpace(first))
	if err != nil || n <= 0 {
		return defaultEphemeral
	}
	return n
}
