package main

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
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

// builds holds the agentd binaries built for this package's tests: the
// top-level tests run in parallel and share them.
var builds struct {
	sync.Mutex
	dir  string
	bins map[bool]string
	errs map[bool]error
}

// TestMain runs the black-box tests in parallel within the load budget
// (raiseParallel) and removes the binaries they built.
func TestMain(m *testing.M) {
	raiseParallel()
	code := m.Run()
	if builds.dir != "" {
		os.RemoveAll(builds.dir)
	}
	os.Exit(code)
}

// buildBinaryRace builds agentd, with the race detector when race is set,
// once for all of the package's tests.
func buildBinaryRace(t *testing.T, race bool) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the agentd binary")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(os.Getenv("GOROOT"), "bin", "go")
		if _, err := os.Stat(goBin); err != nil {
			t.Skip("go command not found")
		}
	}
	builds.Lock()
	defer builds.Unlock()
	if bin, ok := builds.bins[race]; ok {
		return bin
	}
	if err := builds.errs[race]; err != nil {
		t.Fatal(err)
	}
	if builds.dir == "" {
		if builds.dir, err = os.MkdirTemp("", "agentd-test-bin-"); err != nil {
			t.Fatal(err)
		}
		builds.bins, builds.errs = map[bool]string{}, map[bool]error{}
	}
	bin := filepath.Join(builds.dir, "agentd")
	args := []string{"build", "-o"}
	if race {
		bin += "-race"
		args = append(args, bin, "-race")
	} else {
		args = append(args, bin)
	}
	cmd := exec.Command(goBin, append(args, ".")...)
	if out, err := cmd.CombinedOutput(); err != nil {
		builds.errs[race] = fmt.Errorf("go build: %v\n%s", err, out)
		t.Fatal(builds.errs[race])
	}
	builds.bins[race] = bin
	return bin
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
