//go:build unix

package main

import "syscall"

// restrictUmask makes every file agentd creates (the JetStream store,
// Pebble's files, the tenants' data) readable by its user only: 0600
// files in 0700 directories, whatever mode the library creating them asks.
func restrictUmask() { syscall.Umask(0o077) }
