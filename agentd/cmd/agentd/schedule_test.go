package main

import (
	"flag"
	"slices"
	"strconv"
	"strings"
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
// TestCluster is not parallel with them: it runs before them, with no
// other black-box test beside it (its failovers race JetStream elections,
// which starvation stretches); its own cases run clusterLanes at a time,
// on a scheduler of their own.

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
var running = newScheduler(maxLoad, parallelTests)

// parallel runs t in parallel with the other black-box tests, holding l of
// maxLoad until t and its cleanups (its processes killed) are done. secs is
// about how long t takes on CI: of the tests waiting, the longest starts
// first.
//
// A top-level test takes its place in the queue before it pauses: go test
// runs every top-level test up to its t.Parallel in the sequential phase,
// so when the parallel phase opens they are all queued, and none starts
// until all of them resumed. Queued only once resumed, those that resumed
// first took the budget and a longer one waited for it (TestUpgrade, 93 s
// on CI, at the end of the critical path).
func parallel(t *testing.T, l load, secs int) {
	t.Helper()
	var w *waiter
	if !strings.Contains(t.Name(), "/") {
		w = running.register(l, secs)
	}
	t.Parallel()
	if w == nil {
		w = running.enqueue(l, secs)
	} else {
		running.arrive(w)
	}
	running.hold(t, w, "the load budget")
}

// hold waits until w is admitted, and holds its load until t and its
// cleanups are done. A wait of more than a second is logged as waiting
// for what: go test's time for t counts it too.
func (s *scheduler) hold(t *testing.T, w *waiter, what string) {
	t.Helper()
	asked := time.Now()
	if err := s.wait(t, w); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	timeline.mark("%s began (load %d) after %s waiting for %s", t.Name(), w.load, began.Sub(asked).Round(time.Second), what)
	t.Cleanup(func() {
		s.release(w)
		timeline.mark("%s ended after %s (about %d s expected)", t.Name(), time.Since(began).Round(time.Second), w.secs)
	})
	if waited := began.Sub(asked); waited > time.Second {
		t.Logf("started after %s waiting for %s", waited.Round(time.Second), what)
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
// waiting first. A long one that does not fit yet (the head) is overtaken
// only by shorter ones that leave it its load: those overtaking it hold at
// most the budget less its load, so it starts once the tests that ran when
// it became the head ended, as if none had overtaken it, and a cluster
// test is not starved by light ones. A light test beside TestUpgrade, with
// TestClusterOwnedViews at the head, had left a third of the budget idle.
//
// A waiter registered before its test paused (register) is absent until
// the test resumes (arrive): it is never admitted absent, since an
// admitted test holds its load, and a paused one may wait for one of go
// test's -parallel slots, held by a test waiting here. While any is
// absent, none is admitted, so one that resumed first does not overtake a
// longer one still resuming; unless those registered together (a wave)
// are more than half of the -parallel slots, so that the ones waiting here
// could hold every slot an absent one needs.
type scheduler struct {
	budget   load
	slots    int // go test's -parallel
	mu       sync.Mutex
	free     load
	waiting  []*waiter // longest first, then in arrival order
	absent   int       // registered waiters whose tests have not resumed
	wave     int       // waiters registered since none was absent
	head     *waiter   // the first present waiter that did not fit, if any
	overtook load      // held by the tests admitted before head while it waited
}

type waiter struct {
	load   load
	secs   int
	absent bool
	ready  chan struct{}
	before *waiter // the head this one overtook, if it did
}

func newScheduler(budget load, slots int) *scheduler {
	return &scheduler{budget: budget, slots: slots, free: budget}
}

// wait waits until w is admitted, or t's context ends.
func (s *scheduler) wait(t *testing.T, w *waiter) error {
	select {
	case <-w.ready:
		return nil
	case <-t.Context().Done():
		s.withdraw(w)
		return t.Context().Err()
	}
}

// withdraw takes w out of the queue: its test will not run (-run skipped
// it) or stopped waiting. If it was admitted meanwhile, its load goes
// back.
func (s *scheduler) withdraw(w *waiter) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.present(w)
	select {
	case <-w.ready: // admitted meanwhile: give it back
		s.giveBack(w)
	default:
		s.waiting = slices.DeleteFunc(s.waiting, func(o *waiter) bool { return o == w })
	}
	s.admit()
}

// admitted reports whether w's test may start (its ready is closed).
func (w *waiter) admitted() bool {
	select {
	case <-w.ready:
		return true
	default:
		return false
	}
}

// enqueue queues a waiter for load l, admitted when its ready is closed.
func (s *scheduler) enqueue(l load, secs int) *waiter {
	s.mu.Lock()
	defer s.mu.Unlock()
	w := s.insert(l, secs)
	s.admit()
	return w
}

// register queues an absent waiter for load l: admitted only once its
// test arrives.
func (s *scheduler) register(l load, secs int) *waiter {
	s.mu.Lock()
	defer s.mu.Unlock()
	w := s.insert(l, secs)
	w.absent = true
	s.absent++
	s.wave++
	return w
}

// arrive marks a registered waiter's test resumed.
func (s *scheduler) arrive(w *waiter) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.present(w)
	s.admit()
}

// present counts w no longer absent. s.mu is held.
func (s *scheduler) present(w *waiter) {
	if w.absent {
		w.absent = false
		if s.absent--; s.absent == 0 {
			s.wave = 0
		}
	}
}

// insert puts a new waiter after the longer ones and the equal ones
// already waiting. s.mu is held.
func (s *scheduler) insert(l load, secs int) *waiter {
	w := &waiter{load: min(l, s.budget), secs: secs, ready: make(chan struct{})}
	i, _ := slices.BinarySearchFunc(s.waiting, secs, func(w *waiter, secs int) int {
		if w.secs >= secs {
			return -1 // after the longer ones and the equal ones already waiting
		}
		return 1
	})
	s.waiting = slices.Insert(s.waiting, i, w)
	return w
}

// release returns w's load to the budget and admits who now fits.
func (s *scheduler) release(w *waiter) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.giveBack(w)
	s.admit()
}

// giveBack returns an admitted w's load. s.mu is held.
func (s *scheduler) giveBack(w *waiter) {
	s.free += w.load
	if w.before != nil && w.before == s.head {
		s.overtook -= w.load
	}
}

// admit starts the present waiting tests in order while they fit, and
// after the first that does not (the head), those that fit the budget it
// leaves to overtakers; none while a wave that fits the -parallel slots
// is still resuming. s.mu is held.
func (s *scheduler) admit() {
	if s.absent > 0 && 2*s.wave <= s.slots {
		return
	}
	var head *waiter
	for i := 0; i < len(s.waiting); {
		w := s.waiting[i]
		switch {
		case w.absent || w.load > s.free:
			if head == nil && !w.absent {
				head = w
				if head != s.head {
					s.head, s.overtook = head, 0
				}
			}
			i++
			continue
		case head != nil && s.overtook+w.load > s.budget-head.load:
			i++
			continue
		case head != nil:
			w.before = head
			s.overtook += w.load
		}
		s.waiting = slices.Delete(s.waiting, i, i+1)
		s.free -= w.load
		close(w.ready)
	}
	if head == nil {
		s.head, s.overtook = nil, 0
	}
}

// parallelTests is go test's -parallel for this package when the command
// line does not set one: high enough that the load budget, not -parallel,
// bounds the black-box tests (a test waiting for its load holds a
// -parallel slot). An explicit -parallel (1 runs them one at a time) still
// wins.
const parallelTests = 64

// raiseParallel sets -test.parallel to parallelTests unless the command
// line set it, and tells running how many slots there are.
func raiseParallel() {
	if !flag.Parsed() {
		flag.Parse()
	}
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		flag.Set("test.parallel", strconv.Itoa(parallelTests))
	}
	if n, err := strconv.Atoi(flag.Lookup("test.parallel").Value.String()); err == nil {
		running.slots = n
	}
}

// TestScheduler: of the tests waiting, the longest starts first; one that
// does not fit yet is not overtaken by shorter ones; the load admitted
// never passes the budget.
func TestScheduler(t *testing.T) {
	s := newScheduler(4, parallelTests)
	held := &waiter{load: 4}
	s.free = 0 // all of it held
	var ws []*waiter
	for _, c := range []struct {
		l    load
		secs int
	}{{1, 5}, {2, 300}, {2, 20}, {1, 30}, {1, 6}, {2, 40}, {4, 35}} {
		ws = append(ws, s.enqueue(c.l, c.secs))
	}
	bySecs := func(secs int) *waiter {
		return ws[slices.IndexFunc(ws, func(w *waiter) bool { return w.secs == secs })]
	}
	started := map[int]bool{}
	check := func(after string, want ...int) {
		t.Helper()
		var got []int
		for _, w := range ws {
			if w.admitted() && !started[w.secs] {
				started[w.secs] = true
				got = append(got, w.secs)
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
	s.release(held)
	check("all released", 300, 40)
	s.release(bySecs(300))
	check("300 ended") // 35 needs all 4: the shorter ones wait behind it
	s.release(bySecs(40))
	check("40 ended", 35)
	s.release(bySecs(35))
	check("35 ended", 30, 20, 6)
	s.release(bySecs(30))
	check("30 ended", 5)
}

// TestSchedulerOvertake: a head that does not fit is overtaken by shorter
// tests only within the budget it leaves (3 less its 2), so it starts as
// soon as the test that ran when it became the head ends.
func TestSchedulerOvertake(t *testing.T) {
	s := newScheduler(3, parallelTests)
	upgrade := s.enqueue(2, 340)
	tenants := s.enqueue(1, 290)
	views := s.enqueue(2, 90)
	var light []*waiter
	for _, secs := range []int{80, 70, 60} {
		light = append(light, s.enqueue(1, secs))
	}
	if !upgrade.admitted() || !tenants.admitted() || views.admitted() {
		t.Fatalf("first: upgrade %v, tenants %v, views %v: want the two longest", upgrade.admitted(), tenants.admitted(), views.admitted())
	}
	s.release(tenants) // views (2) does not fit the 1 free: one light test overtakes it
	if !light[0].admitted() || light[1].admitted() || views.admitted() {
		t.Errorf("tenants ended: light %v %v, views %v: want the 80 s one only", light[0].admitted(), light[1].admitted(), views.admitted())
	}
	s.release(upgrade) // the 80 s one still runs: views starts all the same
	if !views.admitted() || light[1].admitted() {
		t.Errorf("upgrade ended: views %v, light %v: want views only", views.admitted(), light[1].admitted())
	}
	s.release(light[0])
	if !light[1].admitted() || light[2].admitted() {
		t.Errorf("the 80 s one ended: want the 70 s one")
	}
	if s.free < 0 {
		t.Errorf("%d over the budget", -s.free)
	}

	// With 2 free and a head of 3 in a budget of 4, one light test
	// overtakes, not two: the head starts when the test before it ends.
	s = newScheduler(4, parallelTests)
	first, head := s.enqueue(2, 300), s.enqueue(3, 100)
	a, b := s.enqueue(1, 50), s.enqueue(1, 40)
	if !first.admitted() || !a.admitted() || b.admitted() || head.admitted() {
		t.Errorf("head of 3 waiting with 2 free: light %v %v: want one", a.admitted(), b.admitted())
	}
	s.release(first)
	if !head.admitted() {
		t.Errorf("the test before the head ended, the head did not start")
	}
}

// TestSchedulerWave: top-level tests registered before they pause start,
// once all of them resumed, the longest first, whatever the order they
// resumed in (the first to resume used to take the budget); with fewer
// -parallel slots than that needs, one that resumed starts without
// waiting for the absent ones, which it never overtakes once present.
func TestSchedulerWave(t *testing.T) {
	started := func(ws ...*waiter) (secs []int) {
		for _, w := range ws {
			if w.admitted() {
				secs = append(secs, w.secs)
			}
		}
		slices.Sort(secs)
		return secs
	}
	s := newScheduler(3, parallelTests)
	upgrade, views, mcp, verify := s.register(2, 340), s.register(2, 90), s.register(1, 70), s.register(1, 55)
	all := []*waiter{upgrade, views, mcp, verify}
	s.arrive(verify)
	s.arrive(mcp)
	sub := s.enqueue(1, 100) // a subtest, queued once resumed
	if got := started(append(all, sub)...); len(got) != 0 {
		t.Errorf("with the wave still resuming, started %v, want none", got)
	}
	s.arrive(views)
	s.arrive(upgrade)
	if got := started(append(all, sub)...); !slices.Equal(got, []int{100, 340}) {
		t.Errorf("once the wave resumed, started %v, want [100 340]: the longest that fit", got)
	}
	s.release(sub) // the subtest ended: 90 needs 2, 70 overtakes it within the 1 it leaves
	if got := started(all...); !slices.Equal(got, []int{70, 340}) {
		t.Errorf("with 1 free, started %v, want [70 340]", got)
	}
	s.release(upgrade)
	if got := started(all...); !slices.Equal(got, []int{70, 90, 340}) {
		t.Errorf("340 ended: started %v, want [70 90 340]", got)
	}
	if s.free < 0 {
		t.Errorf("%d over the budget", -s.free)
	}

	// Two slots for a wave of three: waiting for the absent ones could
	// hold the slots they need, so a present one starts at once.
	s = newScheduler(3, 2)
	long, short, other := s.register(2, 300), s.register(1, 5), s.register(1, 6)
	s.arrive(short)
	if got := started(long, short, other); !slices.Equal(got, []int{5}) {
		t.Errorf("wave over the slots: started %v, want [5]", got)
	}
	s.arrive(long)
	if got := started(long, short, other); !slices.Equal(got, []int{5, 300}) {
		t.Errorf("wave over the slots: started %v, want [5 300]", got)
	}
}

// TestSchedulerWithdraw: a registered waiter whose test never runs (-run
// skipped it) and is withdrawn holds no one back, and one withdrawn after
// its admission gives its load back (TestCluster's cases).
func TestSchedulerWithdraw(t *testing.T) {
	s := newScheduler(2, parallelTests)
	long, skipped, short := s.register(1, 125), s.register(1, 60), s.register(1, 20)
	s.arrive(long)
	s.arrive(short)
	if long.admitted() || short.admitted() {
		t.Fatal("started while a registered case was still absent")
	}
	s.withdraw(skipped)
	if !long.admitted() || !short.admitted() || skipped.admitted() {
		t.Fatalf("after the skipped case was withdrawn: long %v short %v skipped %v, want the two present ones started",
			long.admitted(), short.admitted(), skipped.admitted())
	}
	s.withdraw(long) // admitted: its lane comes back
	if s.free != 1 || s.absent != 0 || len(s.waiting) != 0 {
		t.Errorf("free %d, absent %d, waiting %d; want 1, 0, 0", s.free, s.absent, len(s.waiting))
	}
}
