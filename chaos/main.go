package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/internal/backoff"
	"github.com/forever-agents/forever/internal/chartargs"
	"github.com/forever-agents/forever/replay"
	"github.com/forever-agents/forever/verify"
	"github.com/nats-io/nats.go"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// options are the command's flags.
type options struct {
	bin          string
	kills        int
	seed         uint64
	chats, steps int
	nodes        int
	leaseTTL     time.Duration
	auth         bool
	keep         bool
	// stepdowns and handoffs are the shapes of shapes.go, placed at
	// random between kills.
	stepdowns, handoffs int
	// agentdFlags are added to every node's flags (-agentd-flags), after
	// the chart's and chaos's own tuning.
	agentdFlags []string
	// stallAgents are the stall watch's agents (stalls.go).
	stallAgents int
}

// results is what one run found.
type results struct {
	kills, stops int
	ready        []time.Duration
	took         time.Duration // from the first kill's wait to the load's end
	ops          map[string]int
	report       verify.Report
	anomalies    []string // the readers'
	conversation []string // checkConversations'
	read         conversationStats
	turns        []string // checkTurns'
	turnStats    turnStats
	dataVerify   string // output of agentd verify when it failed

	// stepdowns and handoffs done (shapes.go); stepdownsRefused of the
	// stepdowns JetStream refused (no leader to step down).
	stepdowns, stepdownsRefused, handoffs int
	// shapeProblems are what the shapes found themselves: a node that did
	// not stop cleanly on SIGTERM.
	shapeProblems []string
	// stalls is the stall watch's measure of each kill (stalls.go), and
	// stallReads how its reads went.
	stalls     []stallResult
	stallReads string
}

func (r *results) violations() int {
	n := len(r.report.Violations) + len(r.anomalies) + len(r.conversation) + len(r.turns) + len(r.shapeProblems)
	if r.dataVerify != "" {
		n++
	}
	return n
}

// run returns the exit code: 0 clean, 1 violations or failure, 2 usage.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("chaos", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	fs.StringVar(&o.bin, "bin", "", "agentd binary (default: build ./agentd/cmd/agentd)")
	fs.IntVar(&o.kills, "kills", 20, "SIGKILLs (and restarts) of agentd nodes")
	fs.Uint64Var(&o.seed, "seed", 0, "seed of the kill schedule and the load's choices (default: from the clock)")
	fs.IntVar(&o.chats, "chats", 3, "chat agents")
	fs.IntVar(&o.steps, "steps", 2, "steps agents")
	fs.IntVar(&o.nodes, "nodes", 1, "agentd nodes: 1 runs one with the embedded server, more a cluster started as the Helm chart starts its pods")
	fs.DurationVar(&o.leaseTTL, "lease-ttl", chartargs.DefaultLeaseTTL, "partition lease TTL of a cluster's nodes (--lease-ttl); shorter ones make ownership change more often")
	fs.BoolVar(&o.auth, "auth", true, "run a cluster with auth, the chart's default (one shared secret; the load runs in a tenant); false runs it without, as auth.enabled=false does")
	fs.BoolVar(&o.keep, "keep", false, "keep the data dirs and agentd's logs")
	fs.IntVar(&o.stepdowns, "stepdowns", 0, "times the events stream's JetStream leader is made to step down, at random points between kills, just after a chat is sent, while every chat in flight is sent again (needs -nodes 2 or more)")
	fs.IntVar(&o.handoffs, "handoffs", 0, "orderly stops (SIGTERM) and restarts of the node that owns the agent of a chat just sent, at random points between kills, so partitions move without a kill while every chat in flight is sent again to another node (needs -nodes 2 or more)")
	fs.IntVar(&o.stallAgents, "stall-agents", 0, "steps agents that write without pause, whose stalls after each kill are measured and printed: the victim's (owned by the killed node or in a shard it led) and the others' (needs -nodes 2 or more)")
	agentdFlags := fs.String("agentd-flags", "", "flags added to every node's flags, space-separated, such as \"--shards 8 --owned-views\"")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if o.kills < 0 || o.chats < 0 || o.steps < 0 || o.nodes < 1 || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "chaos: -kills, -chats and -steps must be >= 0, -nodes >= 1, and no arguments are taken")
		return 2
	}
	if o.stepdowns < 0 || o.handoffs < 0 || o.stallAgents < 0 || (o.nodes == 1 && o.stepdowns+o.handoffs+o.stallAgents > 0) {
		fmt.Fprintln(stderr, "chaos: -stepdowns and -handoffs, and -stall-agents, must be >= 0, and need -nodes 2 or more")
		return 2
	}
	if o.nodes > 1 && o.leaseTTL < time.Second {
		fmt.Fprintln(stderr, "chaos: -lease-ttl must be at least 1s")
		return 2
	}
	o.agentdFlags = strings.Fields(*agentdFlags)
	if o.seed == 0 {
		o.seed = uint64(time.Now().UnixNano())
	}
	dir, err := os.MkdirTemp("", "forever-chaos-")
	if err != nil {
		fmt.Fprintln(stderr, "chaos:", err)
		return 1
	}
	res, err := chaos(ctx, o, dir, stderr)
	failed := err != nil || res.violations() > 0
	if res != nil {
		printTable(stdout, o, res)
	}
	if err != nil {
		fmt.Fprintln(stderr, "chaos:", err)
	}
	if failed || o.keep {
		fmt.Fprintf(stderr, "chaos: data dirs and agentd logs kept in %s\n", dir)
	} else {
		os.RemoveAll(dir)
	}
	if failed {
		return 1
	}
	return 0
}

// chaos runs the load and the kills, then verifies.
func chaos(ctx context.Context, o options, dir string, stderr io.Writer) (*results, error) {
	logf := func(format string, args ...any) {
		fmt.Fprintf(stderr, "chaos: %s "+format+"\n", append([]any{time.Now().Format("15:04:05.000")}, args...)...)
	}
	rng := rand.New(rand.NewPCG(o.seed, 1))
	bin := o.bin
	if bin == "" {
		logf("building agentd")
		var err error
		if bin, err = buildAgentd(ctx, dir); err != nil {
			return nil, err
		}
	}
	var ns *nodes
	var err error
	requestTimeout := 5 * time.Second
	if o.nodes == 1 {
		ns, err = singleNode(bin, dir, o.agentdFlags)
	} else {
		ns, err = clusterNodes(bin, dir, o.nodes, o.leaseTTL, o.auth, o.agentdFlags)
		if err == nil {
			ns.tenantConns = o.tenantConns()
		}
		// A command may wait for the partition's new owner, and JetStream
		// for a stream's new leader.
		requestTimeout = 15 * time.Second
	}
	if err != nil {
		return nil, err
	}
	defer ns.closeLogs()
	defer ns.killAll()
	logf("starting %d node(s)", len(ns.list))
	if err := ns.startAll(ctx, dir); err != nil {
		return nil, err
	}

	// Each load worker has its own connection, the workers' preferred
	// nodes spread over the cluster; checker's is the check's.
	var conns []*nats.Conn
	defer func() {
		for _, nc := range conns {
			nc.Close()
		}
	}()
	newClientTo := func(preferred int, name string) (*client, error) {
		nc, err := ns.connect(preferred, name)
		if err != nil {
			return nil, err
		}
		conns = append(conns, nc)
		lg, err := eventlog.Open(ctx, eventlog.Config{Conn: nc, Bind: true, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			return nil, err
		}
		return &client{nc: nc, stream: replay.NewClient(lg), lg: lg}, nil
	}
	checker, err := newClientTo(0, "chaos check")
	if err != nil {
		return nil, err
	}
	defer checker.lg.Close()

	res := &results{}
	l := newLoad(requestTimeout)
	loadCtx, stopLoad := context.WithCancel(ctx)
	var wg sync.WaitGroup
	worker := 0
	startWorker := func(name string, run func(*client)) error {
		c, err := newClientTo(worker, name)
		worker++
		if err != nil {
			return err
		}
		wg.Go(func() {
			defer c.lg.Close()
			run(c)
		})
		return nil
	}
	for i := range o.chats {
		r := rand.New(rand.NewPCG(o.seed, uint64(100+i)))
		agent := fmt.Sprintf("chaos-chat-%d", i)
		if err = startWorker(agent, func(c *client) { l.chat(loadCtx, c, agent, r) }); err != nil {
			break
		}
	}
	for i := range o.steps {
		r := rand.New(rand.NewPCG(o.seed, uint64(200+i)))
		agent := fmt.Sprintf("steps:chaos-%d", i)
		if err != nil {
			break
		}
		err = startWorker(agent, func(c *client) { l.steps(loadCtx, c, agent, r) })
	}
	var watch *stallWatch
	if err == nil && o.stallAgents > 0 {
		if watch, err = newStallWatch(ctx, checker.nc, checker.lg.Prefix(), o.stallAgents, o.leaseTTL, filepath.Join(dir, "stall-reads.log")); err == nil {
			for _, agent := range watch.agents {
				if err = startWorker(agent, func(c *client) { watch.run(loadCtx, l, c, agent) }); err != nil {
					break
				}
			}
		}
	}
	// The shapes' resends go over connections of their own, one
	// preferring each node; their schedule has its own random stream, so
	// a seed's kills are the same with and without them.
	sh := &shaper{plan: planShapes(rand.New(rand.NewPCG(o.seed, 3)), o.kills, o.stepdowns, o.handoffs),
		rng: rand.New(rand.NewPCG(o.seed, 4)), l: l, ns: ns, admin: checker.nc, prefix: checker.lg.Prefix(), ttl: o.leaseTTL}
	if watch != nil {
		sh.disrupting = watch.disrupting
	}
	for i := range ns.list {
		if err != nil || o.stepdowns+o.handoffs == 0 {
			break
		}
		var nc *nats.Conn
		if nc, err = ns.connect(i, fmt.Sprintf("chaos resend %d", i)); err == nil {
			conns = append(conns, nc)
			sh.pool = append(sh.pool, nc)
		}
	}
	if err == nil {
		began := time.Now()
		logf("seed %d: %d kills of %d node(s), %d stepdowns, %d handoffs, data in %s", o.seed, o.kills, len(ns.list), o.stepdowns, o.handoffs, dir)
		err = crash(ctx, ns, rng, sh, watch, o, res, logf)
		res.took = time.Since(began)
	}
	stopLoad()
	wg.Wait()
	l.resends.Wait()
	if err != nil {
		return res, err
	}
	if watch != nil {
		res.stalls = watch.measure()
		res.stallReads = watch.rec.String()
	}
	logf("%d kills, %d stops, %d stepdowns and %d handoffs in %s; verifying", res.kills, res.stops, res.stepdowns, res.handoffs, res.took.Round(time.Second))

	l.mu.Lock()
	res.ops, res.anomalies = l.mu.ops, l.mu.anomalies
	acked := slices.Clone(l.mu.acked)
	l.mu.Unlock()
	// The turns first: checkTurns waits (turnsWait) until every
	// acknowledged chat's stream ended. A message queued behind a turn is
	// durable in its queue fiber's start, but its turn.started and its
	// place in the conversation come when a node recovers that fiber,
	// which after the last kill may be after the run ended: verify and the
	// conversation check read the log once that settled.
	if res.turns, res.turnStats, err = l.checkTurns(ctx, checker); err != nil {
		return res, fmt.Errorf("turns: %w", err)
	}
	for range 50 { // agentd may still be recovering its streams
		if res.report, err = verify.Check(ctx, checker.lg, verify.Options{Acked: acked}); err == nil {
			break
		}
		sleep(ctx, 200*time.Millisecond)
	}
	if err != nil {
		return res, fmt.Errorf("verify: %w", err)
	}
	// The whole report, notes included, beside the logs.
	os.WriteFile(filepath.Join(dir, "verify.txt"), []byte(res.report.String()), 0o644)
	if res.conversation, res.read, err = l.checkConversations(ctx, checker); err != nil {
		return res, fmt.Errorf("conversations: %w", err)
	}
	var runs int
	res.dataVerify, runs, err = agentdVerify(ctx, bin, ns)
	if runs > 1 {
		logf("agentd verify ran %d times: the log was purged during every read of the first %d (the stall agents' last fibers still writing)", runs, runs-1)
	}
	return res, err
}

// verifyQuietWait bounds how long agentdVerify runs "agentd verify" again
// on a cluster whose log was purged during every read of a run: the stall
// agents' last steps fibers go on writing, and their agents compacting,
// for up to stallFiberSteps x stallFiberDelayMS after the load stopped.
// verifyAgainPause is the pause between those runs.
const (
	verifyQuietWait  = stallFiberSteps*stallFiberDelayMS*time.Millisecond + time.Minute
	verifyAgainPause = 10 * time.Second
)

// agentdVerify runs "agentd verify" as an operator would once the run is
// over, and returns its output when it fails, and how many times it ran:
// over NATS on a cluster (with the admin credential, which checks every
// tenant's log too; its data dirs hold clustered stores, which only the
// cluster serves), then stops the nodes; on a single node, it stops it
// first and verifies its data dir. On a cluster still compacting it runs
// verify again while verify says so (runVerify).
func agentdVerify(ctx context.Context, bin string, ns *nodes) (string, int, error) {
	args := []string{"verify", "--data", ns.list[0].data}
	if ns.clustered() {
		args = []string{"verify", "--nats-url", ns.urls()}
		if ns.auth {
			args = append(args, "--creds", ns.creds) // and every tenant's log
		}
	} else if err := ns.stopAll(); err != nil {
		return "", 0, err
	}
	failed, runs := runVerify(ctx, bin, args, verifyQuietWait, verifyAgainPause)
	return failed, runs, ns.stopAll()
}

// runVerify runs bin with args (agentd verify) and returns its output when
// it fails, and how many times it ran. A run that failed only because the
// log was purged during every one of its reads (verify.ErrUnsettled: a live
// node compacting) is run again after pause, as operations.md tells an
// operator to, until quiet has passed; any other failure is returned at
// once.
func runVerify(ctx context.Context, bin string, args []string, quiet, pause time.Duration) (failed string, runs int) {
	until := time.Now().Add(quiet)
	var out bytes.Buffer
	err := backoff.Retry(ctx, pause, pause, func(error) bool {
		return onlyUnsettled(out.String()) && !time.Now().Add(pause).After(until)
	}, func() error {
		runs++
		out.Reset()
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Stdout, cmd.Stderr = &out, &out
		return cmd.Run()
	})
	if err != nil {
		failed = fmt.Sprintf("agentd %s: %v\n%s", strings.Join(args, " "), err, out.String())
	}
	return failed, runs
}

// onlyUnsettled reports whether agentd verify's output says it failed
// because the log was purged during every read (of some log: with the
// admin credential it reads each tenant's), and names no violation (a
// line "violation: ..."), which a run again would only repeat.
func onlyUnsettled(out string) bool {
	if !strings.Contains(out, verify.ErrUnsettled.Error()) {
		return false
	}
	for line := range strings.Lines(out) {
		if strings.HasPrefix(line, "violation: ") {
			return false
		}
	}
	return true
}

// crash kills (or freezes) a random node at random intervals until nodes
// were killed o.kills times, restarting each after its kill, and runs the
// shapes sh placed between them (shapes.go). On a cluster a killed node
// stays down for a random part of a lease TTL (its partitions may move
// meanwhile), a freeze lasts 0.3 to 2 lease TTLs (past one, the node's
// leases are gone when it continues), and each kill or freeze waits until
// every node is ready again, so the cluster loses one node at a time, as
// JetStream's R3 allows. A stall watch, when there is one, notes each
// kill's victim's share before the kill and the kill's times after.
func crash(ctx context.Context, ns *nodes, rng *rand.Rand, sh *shaper, watch *stallWatch, o options, res *results, logf func(string, ...any)) error {
	for res.kills < o.kills {
		if err := sh.runGap(ctx, res.kills, res, logf); err != nil {
			return err
		}
		sleep(ctx, time.Duration(800+rng.IntN(2200))*time.Millisecond)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		d := ns.list[rng.IntN(len(ns.list))]
		if ns.clustered() {
			if err := ns.waitAllReady(ctx); err != nil {
				return err
			}
		}
		if rng.IntN(5) == 0 {
			dur := time.Duration(1000+rng.IntN(2000)) * time.Millisecond
			if ns.clustered() {
				dur = time.Duration(3+rng.IntN(18)) * o.leaseTTL / 10
			}
			res.stops++
			logf("stop %d: SIGSTOP %s for %s", res.stops, d.name, dur.Round(time.Millisecond))
			if watch != nil {
				watch.disrupting()
			}
			d.freeze(ctx, dur)
			continue
		}
		var sk stallKill
		if watch != nil {
			sk = watch.before(ctx, res.kills+1, d.name)
			watch.disrupting()
		}
		sk.killed = time.Now()
		d.kill()
		res.kills++
		down := time.Duration(0)
		if ns.clustered() {
			down = time.Duration(rng.Int64N(int64(o.leaseTTL)))
		}
		logf("kill %d: SIGKILL %s, down for %s", res.kills, d.name, down.Round(time.Millisecond))
		sleep(ctx, down)
		took, err := d.start(ctx)
		if err != nil {
			return fmt.Errorf("restart after kill %d: %w", res.kills, err)
		}
		res.ready = append(res.ready, took)
		if watch != nil {
			sk.ready = time.Now()
			watch.done(ctx, sk)
		}
		logf("kill %d: %s ready again in %s", res.kills, d.name, took.Round(time.Millisecond))
	}
	return sh.runGap(ctx, o.kills, res, logf)
}

func printTable(w io.Writer, o options, r *results) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	ops := 0
	for _, k := range []string{"chats", "follows", "replays", "steps starts"} {
		ops += r.ops[k]
	}
	fmt.Fprintln(tw, "seed\tnodes\tkills\tstops\toperations\tviolations\tready p50\tready p99\tduration")
	fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t%d\t%d\t%s\t%s\t%s\n", o.seed, o.nodes, r.kills, r.stops, ops, r.violations(),
		percentile(r.ready, 50), percentile(r.ready, 99), r.took.Round(time.Second))
	tw.Flush()
	var parts []string
	for _, k := range sortedOps(r.ops) {
		parts = append(parts, fmt.Sprintf("%s %d", k, r.ops[k]))
	}
	fmt.Fprintf(w, "operations: %s\n", strings.Join(parts, ", "))
	// The violations one by one; the notes (states the log allows) by
	// kind, as compaction alone makes hundreds.
	rep := r.report
	notes := map[string]int{}
	for _, n := range rep.Notes {
		notes[string(n.Kind)]++
	}
	rep.Notes = nil
	fmt.Fprint(w, "verify: ", rep.String())
	if len(notes) > 0 {
		parts = parts[:0]
		for _, k := range sortedOps(notes) {
			parts = append(parts, fmt.Sprintf("%s %d", k, notes[k]))
		}
		fmt.Fprintf(w, "verify notes: %s\n", strings.Join(parts, ", "))
	}
	fmt.Fprintf(w, "conversations: %d messages read, %d from users, %d of them without an assistant message after them (merged or steered ones among them), %d acknowledged commands removed by a rollback\n",
		r.read.messages, r.read.users, r.read.unanswered, r.read.rolledBack)
	// The checks of one turn per request and one request per turn, by
	// name, so a clean run shows they ran.
	parts = parts[:0]
	for _, k := range oneTurnKinds {
		parts = append(parts, fmt.Sprintf("%s %d", k, countKind(r.report, k)))
	}
	fmt.Fprintf(w, "one turn at a time: %s; %d acknowledged chats, %d sent more than once, %d answered more than once, %d of them not with exactly one turn that ended\n",
		strings.Join(parts, ", "), r.turnStats.acked, r.turnStats.resent, r.turnStats.answered, len(r.turns))
	if o.stepdowns+o.handoffs > 0 {
		fmt.Fprintf(w, "shapes: %d stepdowns (%d refused), %d handoffs\n", r.stepdowns, r.stepdownsRefused, r.handoffs)
	}
	if r.stalls != nil {
		fmt.Fprintln(w, "stalls:", r.stallReads)
		printStalls(w, r.stalls, o.leaseTTL)
	}
	for _, a := range r.anomalies {
		fmt.Fprintln(w, "reader:", a)
	}
	for _, a := range r.conversation {
		fmt.Fprintln(w, "conversation:", a)
	}
	for _, a := range r.turns {
		fmt.Fprintln(w, "turns:", a)
	}
	for _, a := range r.shapeProblems {
		fmt.Fprintln(w, "shape:", a)
	}
	if r.dataVerify != "" {
		fmt.Fprint(w, r.dataVerify)
	}
}

// oneTurnKinds are verify's checks of one turn per request and one
// request per turn, which the table names even when they found nothing.
var oneTurnKinds = []verify.Kind{
	verify.KindTurnOverlap, verify.KindTurnTwoFibers, verify.KindTurnStartedTwice,
	verify.KindMessageAnsweredTwice, verify.KindStreamStart, verify.KindStreamNoTerminal,
}

// countKind counts r's violations of kind k.
func countKind(r verify.Report, k verify.Kind) int {
	n := 0
	for _, v := range r.Violations {
		if v.Kind == k {
			n++
		}
	}
	return n
}

func sortedOps(m map[string]int) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// percentile returns the p-th percentile of ds (nearest rank), "-" when
// empty.
func percentile(ds []time.Duration, p int) string {
	if len(ds) == 0 {
		return "-"
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := (len(s)*p + 99) / 100
	return s[max(i-1, 0)].Round(time.Millisecond).String()
}

// tenantConns is the connection limit (--max-conns) of the load's tenant
// on a cluster with auth: twice what it holds. Each worker, the check and
// the resends have a connection, and agentd two a node. A SIGKILLed
// node's connections count on the other servers until its restart says
// it is gone, while its clients connect again elsewhere; a limit without
// that room makes the servers close the tenant's newest connections,
// agentd's own among them, which is NATS's rule and not the case under
// test (docs/operations.md, "A tenant's connections").
func (o options) tenantConns() int {
	conns := 1 + o.chats + o.steps + o.stallAgents + 2*o.nodes
	if o.stepdowns+o.handoffs > 0 {
		conns += o.nodes
	}
	return 2 * conns
}
