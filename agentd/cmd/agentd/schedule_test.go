package main

import (
	"flag"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"
)

// The black-box tests start agentd processes (and Chromium, and clusters)
// and spend most of their time waiting on them, so they run in parallel.
// How many run at once is not go test's -parallel (GOMAXPROCS by default:
// 2 on CI, which left the CPU idle while one test waited on its agentd):
// each holds a share of a fixed budget, its load, while it runs, and the
// longest of those waiting starts first, so that the last to end is a
// short one. The time go test prints for each counts its wait.
//
// A black-box test or subtest:
//   - calls parallel(t, load, secs) first, or is a row of a runBlackBoxes
//     list (TestBinary's binaryCases);
//   - starts its own processes, with their own data dir (t.TempDir) and
//     ports (agentdtest.FreeAddr), and shares no mutable state with the
//     others (no t.Setenv, no os.Chdir, no package-level variables);
//   - if it asserts a timing that CPU starvation breaks, takes a higher
//     load (maxLoad runs it alone among the parallel ones).
//
// TestCluster is not parallel at all: it runs before them, alone (its
// failovers race JetStream elections, which starvation stretches), and so
// does nothing else beside it.

// load is a test's share of maxLoad while it runs.
type load int

const (
	// light: one race-built agentd (restarted as often as the test needs).
	light load = 1
	// withBrowser: one agentd and a headless Chromium.
	withBrowser load = 2
	// cluster: three agentd nodes, not race-built, electing JetStream
	// leaders (TestUpgrade): beside it, one light test at most, as before
	// the budget. With two more, on a busy machine, a starved node's
	// failover broke one of its invariants (a turn's second fiber started
	// while the first was being recovered).
	cluster load = 2
	// alone: one agentd that, starved, loses its own partitions' leases
	// (TestBinary/DiskFull, with --lease-ttl 3s, failed twice in company
	// and never alone; TestBinary/Overload once, four at once;
	// TestBinary/PurgeChunks's clients in two runs of three): no other
	// parallel test beside it.
	alone load = maxLoad
	// maxLoad is the budget: three light tests at once. Four race-built
	// agentds at once on a busy 2-core machine starved single nodes until
	// they lost their own partitions' leases (TestBinary/Overload,
	// DiskFull).
	maxLoad load = 3
)

// running admits the package's black-box tests.
var running = newScheduler(maxLoad)

// parallel runs t in parallel with the other black-box tests, holding l of
// maxLoad until t and its cleanups (its processes killed) are done. secs is
// about how long t takes on CI: of the tests waiting, the longest starts
// first.
func parallel(t *testing.T, l load, secs int) {
	t.Helper()
	t.Parallel()
	asked := time.Now()
	if err := running.acquire(t, l, secs); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { running.release(l) })
	// go test's time for t counts this wait too.
	if waited := time.Since(asked); waited > time.Second {
		t.Logf("started after %s waiting for the load budget", waited.Round(time.Second))
	}
}

// blackBox is one black-box subtest.
type blackBox struct {
	name string
	load load
	secs int // about how long it takes on CI; the longest start first
	run  func(t *testing.T, bin string)
}

// runBlackBoxes runs each case as a parallel subtest of t.
func runBlackBoxes(t *testing.T, bin string, cases []blackBox) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			parallel(t, c.load, c.secs)
			c.run(t, bin)
		})
	}
}

// scheduler admits tests while their loads fit its budget, the longest
// waiting first; a long one that does not fit yet is not overtaken, so a
// cluster test is not starved by light ones.
type scheduler struct {
	budget  load
	mu      sync.Mutex
	free    load
	waiting []*waiter // longest first, then in arrival order
}

type waiter struct {
	load  load
	secs  int
	ready chan struct{}
}

func newScheduler(budget load) *scheduler { return &scheduler{budget: budget, free: budget} }

// acquire waits until t may run with load l, or t's context ends.
func (s *scheduler) acquire(t *testing.T, l load, secs int) error {
	w := s.enqueue(l, secs)
	select {
	case <-w.ready:
		return nil
	case <-t.Context().Done():
		s.mu.Lock()
		defer s.mu.Unlock()
		select {
		case <-w.ready: // admitted meanwhile: give it back
			s.free += w.load
		default:
			s.waiting = slices.DeleteFunc(s.waiting, func(o *waiter) bool { return o == w })
		}
		s.admit()
		return t.Context().Err()
	}
}

// enqueue queues a waiter for load l, admitted when its ready is closed.
func (s *scheduler) enqueue(l load, secs int) *waiter {
	w := &waiter{load: min(l, s.budget), secs: secs, ready: make(chan struct{})}
	s.mu.Lock()
	defer s.mu.Unlock()
	i, _ := slices.BinarySearchFunc(s.waiting, secs, func(w *waiter, secs int) int {
		if w.secs >= secs {
			return -1 // after the longer ones and the equal ones already waiting
		}
		return 1
	})
	s.waiting = slices.Insert(s.waiting, i, w)
	s.admit()
	return w
}

// release returns l to the budget and admits who now fits.
func (s *scheduler) release(l load) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.free += min(l, s.budget)
	s.admit()
}

// admit starts the waiting tests in order while the first fits.
func (s *scheduler) admit() {
	for len(s.waiting) > 0 && s.waiting[0].load <= s.free {
		w := s.waiting[0]
		s.waiting = s.waiting[1:]
		s.free -= w.load
		close(w.ready)
	}
}

// parallelTests is go test's -parallel for this package when the command
// line does not set one: high enough that the load budget, not -parallel,
// bounds the black-box tests (a test waiting for its load holds a
// -parallel slot). An explicit -parallel (1 runs them one at a time) still
// wins.
const parallelTests = 64

// raiseParallel sets -test.parallel to parallelTests unless the command
// line set it.
func raiseParallel() {
	if !flag.Parsed() {
		flag.Parse()
	}
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		flag.Set("test.parallel", strconv.Itoa(parallelTests))
	}
}

// TestScheduler: of the tests waiting, the longest starts first; one that
// does not fit yet is not overtaken by shorter ones; the load admitted
// never passes the budget.
func TestScheduler(t *testing.T) {
	s := newScheduler(4)
	s.free = 0 // all of it held
	var ws []*waiter
	for _, c := range []struct {
		l    load
		secs int
	}{{1, 5}, {2, 300}, {2, 20}, {1, 30}, {1, 6}, {2, 40}, {4, 35}} {
		ws = append(ws, s.enqueue(c.l, c.secs))
	}
	started := map[int]bool{}
	check := func(after string, want ...int) {
		t.Helper()
		var got []int
		for _, w := range ws {
			select {
			case <-w.ready:
				if !started[w.secs] {
					started[w.secs] = true
					got = append(got, w.secs)
				}
			default:
			}
		}
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("%s: started %v, want %v", after, got, want)
		}
		if s.free < 0 {
			t.Errorf("%s: %d over the budget", after, -s.free)
		}
	}
	check("all held")
	s.release(4)
	check("all released", 300, 40)
	s.release(2)
	check("300 ended") // 35 needs all 4: the shorter ones wait behind it
	s.release(2)
	check("40 ended", 35)
	s.release(4)
	check("35 ended", 30, 20, 6)
	s.release(1)
	check("30 ended", 5)
}
