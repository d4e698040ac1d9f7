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
	"slices"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/forever-agents/forever/eventlog"
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
	keep         bool
}

// results is what one run found.
type results struct {
	kills, stops int
	ready        []time.Duration
	ops          map[string]int
	report       verify.Report
	anomalies    []string
	dataVerify   string // output of agentd verify --data when it failed
}

func (r *results) violations() int {
	n := len(r.report.Violations) + len(r.anomalies)
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
	fs.IntVar(&o.kills, "kills", 20, "SIGKILLs (and restarts) of agentd")
	fs.Uint64Var(&o.seed, "seed", 0, "seed of the kill schedule and the load's choices (default: from the clock)")
	fs.IntVar(&o.chats, "chats", 3, "chat agents")
	fs.IntVar(&o.steps, "steps", 2, "steps agents")
	fs.BoolVar(&o.keep, "keep", false, "keep the data dir and agentd's log")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if o.kills < 0 || o.chats < 0 || o.steps < 0 || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "chaos: counts must be >= 0 and no arguments are taken")
		return 2
	}
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
		fmt.Fprintf(stderr, "chaos: data dir and agentd.log kept in %s\n", dir)
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
		fmt.Fprintf(stderr, "chaos: "+format+"\n", args...)
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
	d, err := newDaemon(bin, dir)
	if err != nil {
		return nil, err
	}
	defer d.log.Close()
	defer d.kill()
	if _, err := d.start(ctx); err != nil {
		return nil, err
	}
	nc, err := nats.Connect("nats://"+d.natsAddr, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	lg, err := eventlog.Open(ctx, eventlog.Config{Conn: nc, Bind: true, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return nil, err
	}
	defer lg.Close()

	res := &results{}
	l := newLoad(nc, lg)
	loadCtx, stopLoad := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for i := range o.chats {
		r := rand.New(rand.NewPCG(o.seed, uint64(100+i)))
		wg.Go(func() { l.chat(loadCtx, fmt.Sprintf("chaos-chat-%d", i), r) })
	}
	for i := range o.steps {
		r := rand.New(rand.NewPCG(o.seed, uint64(200+i)))
		wg.Go(func() { l.steps(loadCtx, fmt.Sprintf("steps:chaos-%d", i), r) })
	}
	began := time.Now()
	logf("seed %d: %d kills, data in %s", o.seed, o.kills, dir)
	err = crash(ctx, d, rng, o.kills, res, logf)
	stopLoad()
	wg.Wait()
	if err != nil {
		return res, err
	}
	logf("%d kills and %d stops in %s; verifying", res.kills, res.stops, time.Since(began).Round(time.Second))

	l.mu.Lock()
	res.ops, res.anomalies = l.mu.ops, l.mu.anomalies
	acked := slices.Clone(l.mu.acked)
	l.mu.Unlock()
	for range 50 { // agentd may still be recovering its streams
		if res.report, err = verify.Check(ctx, lg, verify.Options{Acked: acked}); err == nil {
			break
		}
		sleep(ctx, 200*time.Millisecond)
	}
	if err != nil {
		return res, fmt.Errorf("verify: %w", err)
	}
	if err := d.stop(); err != nil {
		return res, err
	}
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, "verify", "--data", d.data)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		res.dataVerify = fmt.Sprintf("agentd verify --data: %v\n%s", err, out.String())
	}
	return res, nil
}

// crash kills (or freezes) agentd at random intervals until it was killed
// kills times, restarting it after each kill.
func crash(ctx context.Context, d *daemon, rng *rand.Rand, kills int, res *results, logf func(string, ...any)) error {
	for res.kills < kills {
		sleep(ctx, time.Duration(800+rng.IntN(2200))*time.Millisecond)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if rng.IntN(5) == 0 {
			dur := time.Duration(1000+rng.IntN(2000)) * time.Millisecond
			d.freeze(ctx, dur)
			res.stops++
			logf("stop %d: SIGSTOP for %s", res.stops, dur.Round(time.Millisecond))
			continue
		}
		d.kill()
		res.kills++
		took, err := d.start(ctx)
		if err != nil {
			return fmt.Errorf("restart after kill %d: %w", res.kills, err)
		}
		res.ready = append(res.ready, took)
		logf("kill %d: ready again in %s", res.kills, took.Round(time.Millisecond))
	}
	return nil
}

func printTable(w io.Writer, o options, r *results) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	ops := 0
	for _, k := range []string{"chats", "follows", "replays", "steps starts"} {
		ops += r.ops[k]
	}
	fmt.Fprintln(tw, "seed\tkills\tstops\toperations\tviolations\tready p50\tready p99")
	fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t%d\t%s\t%s\n", o.seed, r.kills, r.stops, ops, r.violations(),
		percentile(r.ready, 50), percentile(r.ready, 99))
	tw.Flush()
	var parts []string
	for _, k := range sortedOps(r.ops) {
		parts = append(parts, fmt.Sprintf("%s %d", k, r.ops[k]))
	}
	fmt.Fprintf(w, "operations: %s\n", strings.Join(parts, ", "))
	fmt.Fprint(w, "verify: ", r.report.String())
	for _, a := range r.anomalies {
		fmt.Fprintln(w, "reader:", a)
	}
	if r.dataVerify != "" {
		fmt.Fprint(w, r.dataVerify)
	}
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
