package main

import (
	"bytes"
	"flag"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
)

// The package's tests take most of go test's -timeout on CI, and CI's log
// keeps only its tail. go test's own timeout prints the tests still
// running first and every goroutine after, so the names are cut off and
// the tail is one process waiter's stack. The watchdog fires shortly
// before that timeout: it prints, last, where each running test of this
// package waits, and exits.

// requestBound bounds each HTTP request of the tests, its body read
// included: the longest of them (a gateway stream, a console page) take
// seconds, and a request to an agentd that is stopped (SIGSTOP) or wedged
// otherwise waits until go test's -timeout ends the whole package.
const requestBound = 3 * time.Minute

// cliBound bounds each run of an agentd subcommand (runAgentdCLI): a
// backup or restore of a cluster takes seconds.
const cliBound = 5 * time.Minute

// boundHTTP sets the bound on http.DefaultClient, which the tests' plain
// http.Get and http.DefaultClient.Do use. TestMain calls it before any
// test runs.
func boundHTTP() { http.DefaultClient.Timeout = requestBound }

// timeoutMargin is how long before go test's -timeout the watchdog fires.
const timeoutMargin = 45 * time.Second

// watchTimeout starts the watchdog unless -timeout is off or too short for
// the margin. stop ends it.
func watchTimeout() (stop func()) {
	f := flag.Lookup("test.timeout")
	if f == nil {
		return func() {}
	}
	d, err := time.ParseDuration(f.Value.String())
	if err != nil || d <= 2*timeoutMargin {
		return func() {}
	}
	timer := time.AfterFunc(d-timeoutMargin, func() {
		buf := make([]byte, 16<<20)
		buf = buf[:runtime.Stack(buf, true)]
		fmt.Fprintf(os.Stderr, "\nwatchdog: go test's -timeout %s ends in %s; the tests still running, and where they wait:\n", d, timeoutMargin)
		for _, w := range testWaits(buf) {
			fmt.Fprintf(os.Stderr, "\t%s\n", w)
		}
		os.Exit(2)
	})
	return func() { timer.Stop() }
}

var ownFrame = regexp.MustCompile(`^github\.com/forever-agents/forever/agentd/cmd/agentd\.(\S+)\(`)

// testWaits reads a dump of all goroutines and returns, for each one a
// test runs (testing.tRunner at its root) that is in this package's code,
// its header, the innermost line of this package it is on, and this
// package's functions on its stack, innermost first.
func testWaits(dump []byte) []string {
	var out []string
	for _, g := range bytes.Split(dump, []byte("\n\n")) {
		lines := strings.Split(string(g), "\n")
		if !slices.ContainsFunc(lines, func(l string) bool { return strings.HasPrefix(l, "testing.tRunner(") }) {
			continue
		}
		var funcs []string
		at := ""
		for i, l := range lines {
			m := ownFrame.FindStringSubmatch(l)
			if m == nil {
				continue
			}
			if at == "" && i+1 < len(lines) {
				at = strings.TrimSpace(lines[i+1])
				if j := strings.LastIndex(at, " +0x"); j > 0 {
					at = at[:j]
				}
				at = filepath.Base(at)
			}
			funcs = append(funcs, m[1])
		}
		if len(funcs) == 0 || funcs[len(funcs)-1] == "TestMain" {
			continue // not in a test, or m.Run waiting for the tests
		}
		if len(funcs) > 4 {
			funcs = append(funcs[:2], funcs[len(funcs)-2:]...)
		}
		w := fmt.Sprintf("%s at %s, in %s", strings.TrimSuffix(lines[0], ":"), at, strings.Join(funcs, " < "))
		if !slices.Contains(out, w) {
			out = append(out, w)
		}
	}
	return out
}

// TestWatchdogNamesWaits: a dump of this very test names it and the line
// it is on.
func TestWatchdogNamesWaits(t *testing.T) {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	waits := testWaits(buf)
	if !slices.ContainsFunc(waits, func(w string) bool {
		return strings.Contains(w, "watchdog_test.go:") && strings.Contains(w, "in TestWatchdogNamesWaits")
	}) {
		t.Errorf("the watchdog's waits do not name this test:\n%s", strings.Join(waits, "\n"))
	}
}
