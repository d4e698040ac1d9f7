package eventlog_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/eventlog/eventlogtest"
	"github.com/forever-agents/forever/internal/waitfor"
)

// holdAndSend queues one append per agent while l's appends are held,
// sends them as one group, and returns each append's result by agent.
func holdAndSend(t *testing.T, lg *eventlog.Log, agents []string) map[string]error {
	t.Helper()
	queued, release := eventlog.HoldAppends(lg)
	var mu sync.Mutex
	errs := map[string]error{}
	var wg sync.WaitGroup
	for _, agent := range agents {
		wg.Go(func() {
			_, err := appendNote(t.Context(), lg, agent)
			mu.Lock()
			errs[agent] = err
			mu.Unlock()
		})
	}
	waitfor.NoError(t, func() error {
		if n := queued(); n < len(agents) {
			return fmt.Errorf("%d appends to queue, have %d", len(agents), n)
		}
		return nil
	})
	release()
	wg.Wait()
	return errs
}

// TestGroupCommitFencing: appends of several agents sent as one group, one
// of them from a stale owner (another node took its agent over): the stale
// one fails alone with ErrFenced and never lands; the others are stored.
// The group goes as one atomic batch (which the stale append's expected
// sequence fails whole: the rest is sent again without it) and pipelined.
func TestGroupCommitFencing(t *testing.T) {
	for _, how := range []string{"atomic", "pipelined"} {
		t.Run(how, func(t *testing.T) {
			ctx := t.Context()
			nodes := openNodes(t, 2)
			a, b := nodes[0], nodes[1]
			eventlog.ForceSend(a.lg, how)
			agents := []string{"x"}
			for i := range 10 {
				agents = append(agents, "y"+strconv.Itoa(i))
			}
			for _, agent := range agents {
				a.owner.set(agent, eventlog.Token{Node: "a", Epoch: 1})
				if _, err := appendNote(ctx, a.lg, agent); err != nil {
					t.Fatal(err)
				}
			}
			b.owner.set("x", eventlog.Token{Node: "b", Epoch: 2})
			if _, err := appendNote(ctx, b.lg, "x"); err != nil {
				t.Fatal(err)
			}
			var groups [][]string
			eventlog.OnGroup(a.lg, func(ids []string) { groups = append(groups, ids) })
			errs := holdAndSend(t, a.lg, agents)
			if len(groups) != 1 || len(groups[0]) != len(agents) {
				t.Fatalf("groups sent: %d %v, want one of %d", len(groups), groups, len(agents))
			}
			for agent, err := range errs {
				if agent == "x" && !errors.Is(err, eventlog.ErrFenced) {
					t.Errorf("stale owner's append: %v, want ErrFenced", err)
				}
				if agent != "x" && err != nil {
					t.Errorf("agent %s in the same group: %v", agent, err)
				}
			}
			for _, agent := range agents {
				evs, err := b.lg.Read(ctx, eventlog.Filter{Agent: agent}, 0, 0)
				if err != nil {
					t.Fatal(err)
				}
				if err := eventlog.CheckWriters(evs); err != nil {
					t.Error(err)
				}
				if got, want := len(evs), 2; got != want {
					t.Errorf("agent %s has %d events, want %d", agent, got, want)
				}
				if agent == "x" && evs[len(evs)-1].Writer.Node != "b" {
					t.Errorf("x's last event written by %q after b took it over", evs[len(evs)-1].Writer.Node)
				}
			}
			// The others go on.
			if _, err := appendNote(ctx, a.lg, "y0"); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestGroupCommitOneBatch: concurrent appends of different agents that
// wait for a send in flight go out as one atomic batch, stored contiguously;
// an append that finds nothing in flight goes alone at once.
func TestGroupCommitOneBatch(t *testing.T) {
	lg, _ := eventlogtest.Open(t, eventlog.Config{})
	eventlog.ForceSend(lg, "atomic")
	var groups [][]string
	eventlog.OnGroup(lg, func(ids []string) { groups = append(groups, ids) })
	var agents []string
	for i := range 20 {
		agents = append(agents, "a"+strconv.Itoa(i))
	}
	for agent, err := range holdAndSend(t, lg, agents) {
		if err != nil {
			t.Fatalf("%s: %v", agent, err)
		}
	}
	if len(groups) != 1 || len(groups[0]) != len(agents) {
		t.Fatalf("groups sent: %v, want one of %d", groups, len(agents))
	}
	evs, err := lg.Read(t.Context(), eventlog.Filter{}, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i < len(evs); i++ {
		if evs[i].Seq != evs[i-1].Seq+1 {
			t.Fatalf("sequences %d then %d: not one batch", evs[i-1].Seq, evs[i].Seq)
		}
	}
	if _, err := appendNote(t.Context(), lg, "alone"); err != nil {
		t.Fatal(err)
	}
	if len(groups) != 1 {
		t.Fatalf("a lone append was grouped: %v", groups[1:])
	}
}

// TestGroupCommitCancel: an append whose ctx ends while it waits for the
// next send returns ctx's error and is not sent; the others are.
func TestGroupCommitCancel(t *testing.T) {
	lg, _ := eventlogtest.Open(t, eventlog.Config{})
	queued, release := eventlog.HoldAppends(lg)
	cctx, cancel := context.WithCancel(t.Context())
	gone := make(chan error, 1)
	go func() { _, err := appendNote(cctx, lg, "gone"); gone <- err }()
	kept := make(chan error, 1)
	waitfor.True(t, "the first append to queue", func() bool { return queued() >= 1 })
	go func() { _, err := appendNote(t.Context(), lg, "kept"); kept <- err }()
	waitfor.True(t, "the second append to queue", func() bool { return queued() >= 2 })
	cancel()
	if err := <-gone; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled append: %v", err)
	}
	release()
	if err := <-kept; err != nil {
		t.Fatal(err)
	}
	evs, err := lg.Read(t.Context(), eventlog.Filter{}, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 1 || evs[0].Agent != "kept" {
		t.Fatalf("stored %v, want kept's event only", evs)
	}
}

// TestGroupCommitCrash runs a child process that appends events of many
// agents as grouped atomic batches, and chunks of many streams through a
// Batcher, on an embedded server syncing every write, and SIGKILLs it at
// random moments (server and writers die together, as agentd does). After
// each kill the store, reopened, holds every write the child saw
// acknowledged, every group of appends whole or not at all, and each chat
// stream's chunks as a prefix of what was written, without gaps.
func TestGroupCommitCrash(t *testing.T) {
	if os.Getenv("EVENTLOG_GROUP_CHILD") != "" {
		return
	}
	if testing.Short() {
		t.Skip("crash test")
	}
	torn := 0
	for round := range 4 {
		dir := t.TempDir()
		cmd := exec.Command(os.Args[0], "-test.run=^TestGroupCommitChild$", "-test.v")
		// The child's own temporary dirs go under this test's: a SIGKILLed
		// child never removes them.
		cmd.Env = append(os.Environ(), "EVENTLOG_GROUP_CHILD=1", "EVENTLOG_STORE="+dir, "TMPDIR="+t.TempDir())
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		acked := map[string]eventlog.Seq{}
		var groups [][]string
		lines := make(chan string, 1024)
		go func() {
			sc := bufio.NewScanner(out)
			sc.Buffer(make([]byte, 1<<20), 1<<20)
			for sc.Scan() {
				lines <- sc.Text()
			}
			close(lines)
		}()
		running := false
		for l := range lines {
			if l == "child: running" {
				running = true
				break
			}
		}
		if !running {
			t.Fatal("child ended before running")
		}
		// Not a synchronisation: the kill lands at a random point.
		time.Sleep(time.Duration(200+rand.IntN(400)) * time.Millisecond)
		cmd.Process.Signal(syscall.SIGKILL)
		for l := range lines {
			f := strings.Fields(l)
			switch {
			case len(f) == 3 && f[0] == "ack":
				seq, err := strconv.ParseUint(f[2], 10, 64)
				if err == nil {
					acked[f[1]] = eventlog.Seq(seq)
				}
			case len(f) == 2 && f[0] == "group":
				groups = append(groups, strings.Split(f[1], ","))
			}
		}
		cmd.Wait()

		s := eventlogtest.RunServer(t, eventlogtest.ServerOptions{StoreDir: dir, SyncAlways: true})
		lg := eventlogtest.OpenOn(t, s, eventlog.Config{})
		stored := map[string]eventlog.Seq{}
		evs, err := lg.Read(t.Context(), eventlog.Filter{}, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range evs {
			stored[e.ID] = e.Seq
		}
		streams := map[string][]eventlog.Event{}
		for w := range groupChildWriters {
			agent, stream := "c"+strconv.Itoa(w), "s"+strconv.Itoa(w)
			chunks, err := lg.Read(t.Context(), eventlog.Filter{Agent: agent, Stream: stream}, 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			streams[stream] = chunks
			for _, e := range chunks {
				stored[e.ID] = e.Seq
			}
		}
		for id, seq := range acked {
			if got, ok := stored[id]; !ok || got != seq {
				t.Errorf("round %d: acknowledged %s at seq %d, stored: %v at %d", round, id, seq, ok, got)
			}
		}
		for _, g := range groups {
			n := 0
			for _, id := range g {
				if _, ok := stored[id]; ok {
					n++
				}
			}
			if n != 0 && n != len(g) {
				t.Errorf("round %d: group of %d stored in part (%d): %v", round, len(g), n, g)
			}
			acks := 0
			for _, id := range g {
				if _, ok := acked[id]; ok {
					acks++
				}
			}
			if acks < len(g) {
				torn++ // the kill came while this group was in the air
			}
		}
		for stream, chunks := range streams {
			for i, e := range chunks {
				if want := stream + "/" + strconv.Itoa(i); e.ID != want {
					t.Errorf("round %d: stream %s chunk %d is %s, want %s: not a prefix", round, stream, i, e.ID, want)
					break
				}
			}
		}
		t.Logf("round %d: %d acknowledged, %d events and chunks stored, %d groups", round, len(acked), len(stored), len(groups))
	}
	t.Logf("%d groups were in the air at a kill", torn)
}

// groupChildWriters is how many goroutines of the crash child append
// events, each for an agent of its own, and how many write chunks, each to
// a stream of its own.
const groupChildWriters = 24

// TestGroupCommitChild is the child of TestGroupCommitCrash; it does
// nothing unless started by it.
func TestGroupCommitChild(t *testing.T) {
	if os.Getenv("EVENTLOG_GROUP_CHILD") == "" {
		t.Skip("child of TestGroupCommitCrash")
	}
	s := eventlogtest.RunServer(t, eventlogtest.ServerOptions{StoreDir: os.Getenv("EVENTLOG_STORE"), SyncAlways: true})
	lg := eventlogtest.OpenOn(t, s, eventlog.Config{})
	eventlog.ForceSend(lg, "atomic")
	var out sync.Mutex
	say := func(format string, args ...any) {
		out.Lock()
		fmt.Printf(format+"\n", args...)
		out.Unlock()
	}
	eventlog.OnGroup(lg, func(ids []string) { say("group %s", strings.Join(ids, ",")) })
	b := lg.NewBatcher(eventlog.BatcherConfig{})
	go b.Run(context.Background())
	ctx := context.Background()
	var once sync.Once
	for w := range groupChildWriters {
		go func() {
			for i := 0; ; i++ {
				e := eventlog.Event{Agent: "a" + strconv.Itoa(w), Type: "note.added", ID: fmt.Sprintf("e%d-%d", w, i), Data: []byte(`{}`)}
				seq, err := lg.Append(ctx, e)
				if err != nil {
					say("error %v", err)
					return
				}
				say("ack %s %d", e.ID, seq)
				once.Do(func() { say("child: running") })
			}
		}()
		go func() {
			stream := "s" + strconv.Itoa(w)
			for i := 0; ; i++ {
				p, err := b.Add(ctx, eventlog.Event{Agent: "c" + strconv.Itoa(w), Stream: stream, Type: "chunk", ID: stream + "/" + strconv.Itoa(i), Data: []byte(`{}`)})
				if err != nil {
					say("error %v", err)
					return
				}
				// A few in flight per stream, as a turn streams.
				go func() {
					if seq, err := p.Wait(ctx); err == nil {
						say("ack %s %d", stream+"/"+strconv.Itoa(i), seq)
					}
				}()
				if i%4 == 3 {
					p.Wait(ctx)
				}
			}
		}()
	}
	select {}
}
