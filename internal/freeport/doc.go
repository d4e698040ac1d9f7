// Package freeport hands out loopback TCP addresses for servers that a
// test or a chaos run starts later, often in another process.
//
// A port taken with "listen on :0, close" is free only for a moment: the
// kernel hands the same number to the next process that binds :0, and a
// cluster node started seconds later then dials another test's HTTP server
// as its route. Reserve avoids both ways of losing the port:
//
//   - it picks below the kernel's ephemeral range, which bind(:0) and
//     outgoing connections never use;
//   - while reserved, a UDP socket bound to the same number marks the port
//     taken for every other Reserve, in this process or another, until
//     release (or the process's exit). The server's TCP listener does not
//     clash with it: TCP and UDP ports are separate.
//
// Invariant: two reservations held at once never share a port.
package freeport
