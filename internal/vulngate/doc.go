// Command vulngate reads govulncheck's JSON output (-format json) on stdin
// and decides whether CI fails: it fails on a vulnerability in a module we
// require, whether or not our code calls it (the fix is a version bump in
// go.mod, ours to make), and reports the Go standard library's as warnings
// naming the Go release that fixes them (the fix is the Go toolchain that
// builds the binary, which CI does not choose). .ci/vulncheck runs it.
package main
