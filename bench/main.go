package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"regexp"
	"runtime"
	"runtime/pprof"
	"strings"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// run parses args, runs every selected scenario under every selected sync
// mode, and writes one table (or JSON) to stdout; progress goes to stderr.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return runWith(ctx, args, stdout, stderr, nil)
}

// runWith is run with the agentd build its scenarios use: nil builds one
// for the run (on first use, in a temp dir under -dir removed when the run
// ends); runs at once may share one, which builds once (TestRunSmoke).
func runWith(ctx context.Context, args []string, stdout, stderr io.Writer, build *agentdBuild) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	syncFlag := fs.String("sync", "both", "JetStream sync mode: always, interval or both (each mode on its own fresh server)")
	scale := fs.Float64("n", 1, "scale every scenario's message counts by this factor")
	runFlag := fs.String("run", "", "run only the scenarios whose name matches this regexp")
	jsonOut := fs.Bool("json", false, "write the results as JSON instead of a table")
	dir := fs.String("dir", os.TempDir(), "where the server's store and Pebble dirs go (the disk under test)")
	tcp := fs.Bool("tcp", false, "connect over loopback TCP instead of in-process")
	nodes := fs.Int("nodes", 1, "servers: 1, or a cluster of this many in-process servers with every stream replicated on min(nodes,3), baselines included")
	verbose := fs.Bool("v", false, "log at info level")
	list := fs.Bool("list", false, "list the scenarios and exit")
	temporal := fs.String("temporal", "", "the Temporal CLI binary for the temporal scenario (skipped without it)")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
	mutexProfile := fs.String("mutexprofile", "", "write a mutex contention profile of the whole run to this file")
	blockProfile := fs.String("blockprofile", "", "write a blocking profile of the whole run to this file")
	memProfile := fs.String("memprofile", "", "write an allocation profile of the whole run to this file (go tool pprof -sample_index=alloc_space)")
	windowProfile := fs.String("window-cpuprofile", "", "write a CPU profile of each timed window of the scenarios that mark one (tool-agents' 100 agents) to this file plus .1, .2, ...; go tool pprof merges them")
	leaseTTL := fs.Duration("lease-ttl", 0, "the failover scenario's --lease-ttl instead of the chart's default")
	cpuQuota := fs.Float64("cpu-quota", scaleOutQuota, "the scale-out and restart-share scenarios' CPU quota per node, in CPUs (cgroup v1 cpu.cfs_quota_us); below 0 skips scale-out and runs restart-share's nodes without one")
	agentdFlags := fs.String("agentd-flags", "", "flags the scale-out, failover and restart-share scenarios add to every node's chart flags, space-separated, such as \"--shards 1\" (the unsharded layout; a new cluster gets 8 shards without it)")
	nodeProfiles := fs.String("node-profiles", "", "a dir where the scale-out scenario writes a CPU profile of each node over its window (<n>nodes-<node>.pprof; the nodes run with --pprof) and its log (<n>nodes-<node>.log)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	if *cpuProfile != "" && *windowProfile != "" {
		return errors.New("-cpuprofile and -window-cpuprofile: one CPU profile at a time")
	}
	if *memProfile != "" {
		runtime.MemProfileRate = 64 << 10
		defer writeProfile("allocs", *memProfile, stderr)
	}
	if *mutexProfile != "" {
		runtime.SetMutexProfileFraction(5)
		defer writeProfile("mutex", *mutexProfile, stderr)
	}
	blockRate := 0
	if *blockProfile != "" {
		blockRate = int(10 * time.Microsecond)
		runtime.SetBlockProfileRate(blockRate)
		defer writeProfile("block", *blockProfile, stderr)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	var modes []SyncMode
	switch *syncFlag {
	case "both":
		modes = []SyncMode{SyncAlways, SyncInterval}
	case string(SyncAlways), string(SyncInterval):
		modes = []SyncMode{SyncMode(*syncFlag)}
	default:
		return fmt.Errorf("-sync %q: want always, interval or both", *syncFlag)
	}
	re, err := regexp.Compile(*runFlag)
	if err != nil {
		return fmt.Errorf("-run: %w", err)
	}
	var selected []Scenario
	for _, s := range scenarios() {
		if re.MatchString(s.Name) {
			selected = append(selected, s)
		}
	}
	if *list {
		for _, s := range selected {
			fmt.Fprintln(stdout, s.Name)
		}
		return nil
	}
	if len(selected) == 0 {
		return fmt.Errorf("-run %q matches no scenario", *runFlag)
	}
	level := slog.LevelWarn
	if *verbose {
		level = slog.LevelInfo
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))

	if build == nil {
		buildDir, err := os.MkdirTemp(*dir, "forever-bench-agentd-")
		if err != nil {
			return fmt.Errorf("temp dir: %w", err)
		}
		defer os.RemoveAll(buildDir)
		build = &agentdBuild{dir: buildDir}
	}

	start := time.Now()
	report := Report{Machine: machine(*dir, *tcp, *scale, *nodes)}
	for i, mode := range modes {
		inMode := selected
		if i > 0 {
			inMode = nil
			for _, s := range selected {
				if !s.Once {
					inMode = append(inMode, s)
				}
			}
			if len(inMode) == 0 {
				continue
			}
		}
		rows, errs, err := runMode(ctx, EnvConfig{Mode: mode, Scale: *scale, Dir: *dir, TCP: *tcp, Nodes: *nodes, Logger: logger, BlockProfileRate: blockRate, Agentd: build, Temporal: *temporal, LeaseTTL: *leaseTTL, CPUQuota: *cpuQuota, AgentdFlags: strings.Fields(*agentdFlags), NodeProfiles: *nodeProfiles, WindowProfile: *windowProfile}, inMode, stderr)
		report.Rows = append(report.Rows, rows...)
		report.Errors = append(report.Errors, errs...)
		if err != nil {
			return err
		}
	}
	report.Elapsed = time.Since(start).Round(100 * time.Millisecond).String()
	if *jsonOut {
		err = writeJSON(stdout, report)
	} else {
		err = writeTable(stdout, report)
	}
	if err != nil {
		return err
	}
	if len(report.Errors) > 0 {
		return fmt.Errorf("%d scenario runs failed", len(report.Errors))
	}
	return nil
}

// runMode runs the scenarios on one fresh Env. A failing scenario is
// reported in errs and the others still run; err is for the Env itself or a
// cancelled ctx.
func runMode(ctx context.Context, cfg EnvConfig, selected []Scenario, progress io.Writer) (rows []Row, errs []string, err error) {
	env, err := StartEnv(ctx, cfg)
	if err != nil {
		return nil, nil, err
	}
	defer func() { err = errors.Join(err, env.Close()) }()
	for _, s := range selected {
		if ctx.Err() != nil {
			return rows, errs, ctx.Err()
		}
		t := time.Now()
		fmt.Fprintf(progress, "%-8s %-20s ", env.Mode, s.Name)
		res, err := s.Run(ctx, env)
		fmt.Fprintf(progress, "%s\n", time.Since(t).Round(10*time.Millisecond))
		for _, r := range res.Rows {
			r.Scenario, r.Sync = s.Name, string(env.Mode)
			if s.Once {
				r.Sync = "both"
			}
			rows = append(rows, r)
		}
		if err != nil {
			fmt.Fprintf(progress, "  error: %v\n", err)
			errs = append(errs, fmt.Sprintf("%s %s: %v", s.Name, env.Mode, err))
		}
	}
	return rows, errs, nil
}

// writeProfile writes the named runtime profile to path; a failure is
// reported on stderr, the run's results stand.
func writeProfile(name, path string, stderr io.Writer) {
	f, err := os.Create(path)
	if err == nil {
		err = errors.Join(pprof.Lookup(name).WriteTo(f, 0), f.Close())
	}
	if err != nil {
		fmt.Fprintf(stderr, "bench: %s profile: %v\n", name, err)
	}
}
