package main

import (
	"fmt"
	"os"
	"sync"
	"time"
)

// timeline records when the package's builds and black-box tests began
// and ended, in seconds since the test binary started, into the file that
// FOREVER_TEST_TIMELINE names (.ci/run prints it after the tests, passed
// or failed). go test prints a passing package's output only with -v, and
// CI runs without it; the timeline is how a slow run tells what waited on
// what (a build starved by the niced work beside the tests, the load
// budget, a long test at the end).
var timeline = openTimeline(os.Getenv("FOREVER_TEST_TIMELINE"))

// timelineFile appends marks to a file; its zero value, without a file,
// records nothing.
type timelineFile struct {
	mu    sync.Mutex
	f     *os.File
	start time.Time
}

// openTimeline opens path for appending, or returns a timeline that
// records nothing when path is empty or cannot be opened.
func openTimeline(path string) *timelineFile {
	l := &timelineFile{start: time.Now()}
	if path == "" {
		return l
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		fmt.Fprintf(os.Stderr, "timeline: %v\n", err)
		return l
	}
	l.f = f
	return l
}

// mark appends one line: the seconds since the start, then the message.
func (l *timelineFile) mark(format string, args ...any) {
	if l.f == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	fmt.Fprintf(l.f, "+%4.0fs %s\n", time.Since(l.start).Seconds(), fmt.Sprintf(format, args...))
}
