package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/forever-agents/forever/agentd/agentdtest"
	"github.com/forever-agents/forever/internal/waitfor"
)

// buildBinary builds this package, the agentd command, once per test
// binary (with the race detector when the tests run with it).
func buildBinary(t *testing.T) string {
	t.Helper()
	return buildBinaryRace(t, raceEnabled)
}

// builds holds the agentd binaries built for this package's tests, by
// what they are ("race", "plain", "release <commit>"): the top-level tests
// run in parallel and share them.
var builds struct {
	sync.Mutex
	dir string
	all map[string]*build
}

// build is one binary, built once; done is closed when bin, skip or err
// is set.
type build struct {
	key  string
	done chan struct{}
	bin  string
	skip string // why it cannot be built here (no go command, no git)
	err  error

	// A background build runs niced, in process groups of its own, until
	// a test waits for it (hurry). Guarded by builds.
	nice   bool
	groups []int
}

// makeFunc builds a binary into dir (its own, created) with b.goBuild, and
// returns its path; skip says why it cannot be built here.
type makeFunc func(ctx context.Context, dir string, b *build) (bin, skip string, err error)

// backgroundNice is the niceness of a background build: below the tests
// (0), so it does not slow TestCluster's elections, and above .ci/run's
// own background work (govulncheck and the fuzz targets' builds, at 19),
// which at the same niceness took the CPU equally, so that on a loaded
// runner the race-built agentd the parallel tests wait for was done 9
// minutes into the package, and go test's 20-minute timeout ended it.
const backgroundNice = "10"

// errNoGo: there is no go command to build with.
var errNoGo = errors.New("go command not found")

// startBuild returns the build of key, started with mk if it was not:
// in the background and niced when background is set, else in the
// caller's goroutine (done on return).
func startBuild(ctx context.Context, key string, background bool, mk makeFunc) *build {
	builds.Lock()
	b, ok := builds.all[key]
	if !ok {
		b = &build{key: key, done: make(chan struct{}), nice: background}
		if builds.all == nil {
			builds.all = map[string]*build{}
		}
		builds.all[key] = b
	}
	dir := builds.dir
	if !ok && dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "agentd-test-bin-"); err != nil {
			b.err = err
			close(b.done)
			builds.Unlock()
			return b
		}
		builds.dir = dir
	}
	builds.Unlock()
	if ok {
		return b
	}
	run := func() {
		defer close(b.done)
		sub, err := os.MkdirTemp(dir, "build-")
		if err != nil {
			b.err = err
			return
		}
		began := time.Now()
		timeline.mark("build %q began (background %v)", key, background)
		b.bin, b.skip, b.err = mk(ctx, sub, b)
		timeline.mark("build %q done in %s (err %v)", key, time.Since(began).Round(time.Second), b.err)
	}
	if background {
		go run()
	} else {
		run()
	}
	return b
}

// finish waits for the build to be done, at the waiting test's priority:
// a background build still running is no longer niced.
func (b *build) finish() {
	select {
	case <-b.done:
		return
	default:
	}
	timeline.mark("a test waits for build %q", b.key)
	builds.Lock()
	if b.nice {
		b.nice = false
		for _, g := range b.groups {
			syscall.Setpriority(syscall.PRIO_PGRP, g, 0) // not allowed unprivileged: it then stays niced
		}
	}
	builds.Unlock()
	<-b.done
}

// wait returns the build's binary once it is built, skipping or failing
// t as the build did.
func (b *build) wait(t *testing.T) string {
	t.Helper()
	b.finish()
	if b.skip != "" {
		t.Skip(b.skip)
	}
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.bin
}

// goBuild runs the go command with args in dir ("" for the package's),
// niced in a process group of its own while b is, and returns its output;
// errNoGo when there is no go command.
func (b *build) goBuild(ctx context.Context, dir string, args ...string) ([]byte, error) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(os.Getenv("GOROOT"), "bin", "go")
		if _, err := os.Stat(goBin); err != nil {
			return nil, errNoGo
		}
	}
	builds.Lock()
	defer builds.Unlock()
	cmd := exec.CommandContext(ctx, goBin, args...)
	if nicer, err := exec.LookPath("nice"); b.nice && err == nil {
		cmd = exec.CommandContext(ctx, nicer, append([]string{"-n", backgroundNice, goBin}, args...)...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	}
	cmd.Dir = dir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if cmd.SysProcAttr != nil {
		cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) } // the compilers too
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	if cmd.SysProcAttr != nil {
		b.groups = append(b.groups, cmd.Process.Pid)
	}
	builds.Unlock()
	err = cmd.Wait()
	builds.Lock()
	return out.Bytes(), err
}

// makeAgentd builds this package's agentd, with the race detector when
// race is set.
func makeAgentd(race bool) makeFunc {
	return func(ctx context.Context, dir string, b *build) (string, string, error) {
		bin := filepath.Join(dir, "agentd")
		args := []string{"build", "-o", bin}
		if race {
			args = append(args, "-race")
		}
		switch out, err := b.goBuild(ctx, "", append(args, ".")...); {
		case errors.Is(err, errNoGo):
			return "", err.Error(), nil
		case err != nil:
			return "", "", fmt.Errorf("go build: %v\n%s", err, out)
		}
		return bin, "", nil
	}
}

// agentdBuild is the key of this package's agentd build.
func agentdBuild(race bool) string {
	if race {
		return "race"
	}
	return "plain"
}

// buildBinaryRace builds agentd, with the race detector when race is set,
// once for all of the package's tests.
func buildBinaryRace(t *testing.T, race bool) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the agentd binary")
	}
	return startBuild(context.Background(), agentdBuild(race), false, makeAgentd(race)).wait(t)
}

// prebuild starts, in the background and niced, the builds that the
// parallel black-box tests wait for when they start (the race-built
// agentd, TestUpgrade's previous release, about a CPU-minute each): they
// use the CPU TestCluster, alone in the sequential phase before them,
// leaves idle, instead of adding to the parallel phase. They start once
// the agentd TestCluster runs is built (prebuild builds it first, at the
// tests' priority), so they do not slow that one down. Only when the whole
// package runs (no -run, not -short); stop ends them.
func prebuild() (stop func()) {
	if testing.Short() || flag.Lookup("test.run").Value.String() != "" || flag.Lookup("test.list").Value.String() != "" {
		return func() {}
	}
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan []*build, 1)
	go func() {
		startBuild(ctx, agentdBuild(false), false, makeAgentd(false)).finish()
		started <- []*build{
			startBuild(ctx, agentdBuild(raceEnabled), true, makeAgentd(raceEnabled)),
			startBuild(ctx, releaseBuild(upgradeFrom), true, makeRelease(upgradeFrom)),
		}
	}()
	return func() {
		cancel()
		for _, b := range <-started {
			<-b.done
		}
	}
}

// TestStartBuild: a build started in the background is made once, niced
// until a test waits for it, and a test asking for it meanwhile waits for
// it and gets its binary.
func TestStartBuild(t *testing.T) {
	key := t.Name() + time.Now().Format(time.RFC3339Nano)
	var makes atomic.Int32
	making, release := make(chan struct{}), make(chan struct{})
	mk := func(ctx context.Context, dir string, b *build) (string, string, error) {
		makes.Add(1)
		builds.Lock()
		nice := b.nice
		builds.Unlock()
		close(making)
		<-release
		if !nice {
			return "", "", errors.New("a background build is niced")
		}
		return filepath.Join(dir, "bin"), "", nil
	}
	first := startBuild(t.Context(), key, true, mk)
	got := make(chan string, 1)
	go func() {
		b := startBuild(t.Context(), key, false, mk) // already started: not made again
		<-b.done
		got <- b.bin
	}()
	select {
	case <-first.done:
		t.Fatal("the build was done before it was made")
	default:
	}
	// A test waiting for it takes the niceness off.
	<-making
	go first.finish()
	waitfor.True(t, "the waited-for build no longer niced", func() bool {
		builds.Lock()
		defer builds.Unlock()
		return !first.nice
	})
	close(release)
	bin := first.wait(t)
	if g := <-got; g != bin || filepath.Base(bin) != "bin" {
		t.Errorf("the waiting caller got %q, the build %q", g, bin)
	}
	if n := makes.Load(); n != 1 {
		t.Errorf("made %d times, want once", n)
	}
}

// TestMain runs the black-box tests in parallel within the load budget
// (raiseParallel), bounds their HTTP requests (boundHTTP), names the tests
// still running shortly before go test's -timeout (watchTimeout), starts the builds they wait for ahead
// (prebuild), and removes the binaries they built.
func TestMain(m *testing.M) {
	raiseParallel()
	boundHTTP()
	stopWatch := watchTimeout()
	stop := prebuild()
	code := m.Run()
	stop()
	stopWatch()
	if builds.dir != "" {
		os.RemoveAll(builds.dir)
	}
	os.Exit(code)
}

// TestBinary builds agentd once and runs it as a black box: each case of
// binaryCases starts its own agentd (or several), in parallel with the
// others within the package's load budget (schedule_test.go).
func TestBinary(t *testing.T) {
	t.Parallel()
	runBlackBoxes(t, buildBinary(t), binaryCases)
}

// binaryCases are TestBinary's subtests. A new case takes a row: its name,
// its load (light: one agentd; withBrowser: and Chromium; alone: timings
// that company breaks) and about how many
// seconds it takes (go test -v prints it), so the longest start first.
var binaryCases = []blackBox{
	{"StopsOnSIGTERM", light, 2, testBinarySIGTERM},
	{"PortInUse", light, 1, testBinaryPortInUse},
	{"CrashRecovery", light, 12, testBinaryCrashRecovery},
	{"ChatCrashRecovery", light, 12, testBinaryChatCrash},
	{"RollingUpgrade", light, 4, testBinaryRollingUpgrade},
	{"Gateway", light, 12, testBinaryGateway},
	{"BrowserReload", withBrowser, 22, testBinaryBrowserReload},
	{"BrowserTools", withBrowser, 10, testBinaryBrowserTools},
	{"BrowserAuth", withBrowser, 8, testBinaryBrowserAuth},
	{"Console", withBrowser, 17, testBinaryConsole},
	{"ConsoleTenant", withBrowser, 15, testBinaryConsoleTenant},
	{"HugeReply", light, 10, testBinaryHugeReply},
	{"ToolCrash", light, 17, testBinaryToolCrash},
	{"Approval", light, 12, testBinaryApproval},
	{"Subagents", light, 32, testBinarySubagents},
	{"Overload", alone, 18, testBinaryOverload},
	{"ModelRateLimit", light, 3, testBinaryModelRateLimit},
	{"DiskFull", alone, 9, testBinaryDiskFull},
	{"PurgeChunks", alone, 5, testBinaryPurgeChunks},
	{"DeleteEvents", light, 5, testBinaryDeleteEvents},
	{"DeleteLeases", light, 31, testBinaryDeleteLeases},
	{"CLIReconnect", light, 60, testBinaryCLIReconnect},
	{"LongStop", light, 49, testBinaryLongStop},
	{"AISDK", light, 100, testBinaryAISDK},
	{"Tenants", light, 80, testBinaryTenants},
	{"TLS", light, 4, testBinaryTLS},
	{"OIDC", light, 4, testBinaryOIDC},
	{"ExternalAuth", light, 25, testBinaryExternalAuth},
	{"BackupRestore", light, 55, testBinaryBackupRestore},
	{"DNSRebinding", light, 1, testBinaryDNSRebinding},
	{"Tracing", light, 1, testBinaryTracing},
	{"ContextTokens", light, 2, testBinaryContextTokens},
	{"ShardsMove", light, 20, testBinaryShardsMove},
}

func testBinarySIGTERM(t *testing.T, bin string) {
	data := filepath.Join(t.TempDir(), "data")
	httpAddr, natsAddr := agentdtest.FreeAddr(t), agentdtest.FreeAddr(t)
	var out agentdtest.SyncBuffer
	cmd := exec.Command(bin, "--data", data, "--http", httpAddr, "--nats-listen", natsAddr, "--log-format", "json")
	cmd.Env = append(os.Environ(), "FOREVER_LOG_LEVEL=info")
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			<-exited
		}
	})

	waitfor.NoError(t, func() error {
		resp, err := http.Get("http://" + httpAddr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case err := <-exited:
			t.Fatalf("agentd exited before ready: %v\n%s", err, out.String())
		default:
		}
		return fmt.Errorf("agentd to be ready:\n%s", out.String())
	})
	if !strings.Contains(out.String(), `"msg":"agentd started"`) {
		t.Errorf("no start line in the log:\n%s", out.String())
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("agentd exit: %v\n%s", err, out.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("agentd still running 10s after SIGTERM:\n%s", out.String())
	}
	if _, err := os.Stat(filepath.Join(data, "pebble")); err != nil {
		t.Errorf("pebble dir: %v", err)
	}
}

func testBinaryPortInUse(t *testing.T, bin string) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var stderr bytes.Buffer
	cmd := exec.Command(bin, "--data", t.TempDir(), "--http", ln.Addr().String(), "--nats-listen", "127.0.0.1:0")
	cmd.Env = os.Environ()
	cmd.Stderr = &stderr
	err = cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("got %v, want exit code 1\n%s", err, stderr.String())
	}
	want := "agentd: http address " + ln.Addr().String() + " is in use (set --http or FOREVER_HTTP)\n"
	if got := stderr.String(); got != want {
		t.Errorf("stderr:\n got %q\nwant %q", got, want)
	}
}
