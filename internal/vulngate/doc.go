// Command vulngate reads govulncheck's JSON output (-format json) on stdin
// and decides whether CI fails. It fails on a vulnerability in a module we
// require, whether or not our code calls it (the fix is a version bump in
// go.mod), and on one in the Go standard library that our code reaches
// (the fix is the Go release in GOTOOLCHAIN, which .ci/run, the README and
// the Dockerfile pin). Standard library vulnerabilities no code of ours
// reaches are warnings naming the release that fixes them. .ci/vulncheck
// runs it.
package main
