package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/forever-agents/forever/agentd"
	"github.com/forever-agents/forever/agentd/chathost"
	"github.com/forever-agents/forever/agentd/demo"
	"github.com/forever-agents/forever/agentd/host"
	"github.com/forever-agents/forever/chat"
	"github.com/forever-agents/forever/internal/chartargs"
	"github.com/forever-agents/forever/internal/waitfor"
)

// upgradeFrom is the release a cluster upgrades from: the previous one that
// landed on main. Move it to the last landed commit when a release lands,
// so each release is tested against the one before it (helm/forever/README.md,
// "Upgrade").
const upgradeFrom = "6aba5013528dd052ba8e3ca7e333c0bda325f1a1"

// buildRelease builds agentd as it was at commit, from git (once for the
// package's tests; prebuild starts it ahead). Without git or the commit (a
// shallow clone) the test is skipped, unless FOREVER_REQUIRE_UPGRADE is
// set.
func buildRelease(t *testing.T, commit string) string {
	t.Helper()
	b := startBuild(context.Background(), releaseBuild(commit), false, makeRelease(commit))
	b.finish()
	if b.skip != "" && os.Getenv("FOREVER_REQUIRE_UPGRADE") != "" {
		t.Fatal(b.skip)
	}
	return b.wait(t)
}

// releaseBuild is the key of the build of agentd at commit.
func releaseBuild(commit string) string { return "release " + commit }

// makeRelease builds agentd as it was at commit, from git archive.
func makeRelease(commit string) makeFunc {
	return func(ctx context.Context, dir string, b *build) (string, string, error) {
		top, err := exec.CommandContext(ctx, "git", "rev-parse", "--show-toplevel").Output()
		if err != nil {
			return "", fmt.Sprintf("git: %v", err), nil
		}
		src := filepath.Join(dir, "src")
		if err := os.Mkdir(src, 0o755); err != nil {
			return "", "", err
		}
		archive := exec.CommandContext(ctx, "git", "-C", strings.TrimSpace(string(top)), "archive", "--format=tar", commit)
		untar := exec.CommandContext(ctx, "tar", "-x", "-C", src)
		untar.Stdin, _ = archive.StdoutPipe()
		var aerr strings.Builder
		archive.Stderr = &aerr
		if err := untar.Start(); err != nil {
			return "", "", err
		}
		if err := archive.Run(); err != nil {
			untar.Wait()
			return "", fmt.Sprintf("git archive %s: %v: %s", commit, err, aerr.String()), nil
		}
		if err := untar.Wait(); err != nil {
			return "", "", err
		}
		bin := filepath.Join(dir, "agentd-old")
		switch out, err := b.goBuild(ctx, src, "build", "-o", bin, "./agentd/cmd/agentd"); {
		case errors.Is(err, errNoGo):
			return "", err.Error(), nil
		case err != nil:
			return "", "", fmt.Errorf("build agentd at %s: %v\n%s", commit, err, out)
		}
		// The sources are not needed once built.
		os.RemoveAll(src)
		return bin, "", nil
	}
}

// TestUpgrade rolls a 3-node cluster with auth, as the chart runs it, from
// the previous release's binary to this one, one node at a time, while a
// tenant's chats and fibers keep running: every kind of event the old
// release wrote is read by the new one, every acknowledged chat is
// answered once, every fiber ends, and the logs verify clean.
func TestUpgrade(t *testing.T) {
	parallel(t, cluster, 340)
	if testing.Short() {
		t.Skip("builds two agentd binaries")
	}
	newBin := buildBinaryRace(t, false) // a cluster, as TestCluster runs it
	oldBin := buildRelease(t, upgradeFrom)

	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte(strings.Repeat("u", 48)), 0o400); err != nil {
		t.Fatal(err)
	}
	nodes := newCluster(t, 3, func(p *chartargs.Pod) { p.AuthSecretFile = secret })
	newArgs := map[*clusterNode][]string{}
	for _, nd := range nodes {
		// Compaction every second, so snapshots are among the old events.
		nd.env = append(nd.env, "FOREVER_COMPACT_EVENTS=40", "FOREVER_COMPACT_EVERY=1s", "FOREVER_LOCAL_RATE=200")
		// The old release runs with the flags it knows, as the old chart
		// started it; the new binary gets this chart's.
		// The new release packs chunks once the format switch allows it.
		newArgs[nd] = append(slices.Clone(nd.args), "--pack-chunks")
		nd.args = knownFlags(t, oldBin, nd.args)
		nd.start(t, oldBin)
	}
	waitReady(t, nodes...)
	admin := filepath.Join(nodes[0].data, agentd.AdminCredsFile)
	tc := createTenant(t, oldBin, "nats://"+nodes[0].nats, admin, t.TempDir(), "acme")
	// A connection to every node, so the load survives each one's restart.
	var urls []string
	for _, nd := range nodes {
		urls = append(urls, "nats://"+nd.nats)
	}
	nc := dialRoll(t, strings.Join(urls, ","), nats.UserCredentials(tc.Creds))
	defer nc.close()
	cmd := func(agent, verb string, v any) (json.RawMessage, error) {
		var data []byte
		if v != nil {
			data, _ = json.Marshal(v)
		}
		var last error
		for deadline := time.Now().Add(90 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) { // not a synchronisation: the interval of a poll on a command answered (not 503)
			msg, err := nc.request("forever.cmd."+agent+"."+verb, data)
			switch {
			case err != nil:
				last = err
			case msg.Header.Get("Nats-Service-Error-Code") == "503":
				last = fmt.Errorf("503 %s", msg.Header.Get("Nats-Service-Error"))
			case msg.Header.Get("Nats-Service-Error-Code") != "":
				return nil, fmt.Errorf("%s %s: %s %s", agent, verb, msg.Header.Get("Nats-Service-Error-Code"), msg.Header.Get("Nats-Service-Error"))
			default:
				return msg.Data, nil
			}
		}
		return nil, fmt.Errorf("%s %s: %v", agent, verb, last)
	}
	must := func(agent, verb string, v any) json.RawMessage {
		t.Helper()
		out, err := cmd(agent, verb, v)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	waitIdle := func(agents ...string) {
		t.Helper()
		for _, a := range agents {
			for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(100 * time.Millisecond) { // not a synchronisation: the interval of a poll on the agents' fibers done
				var fibers []host.FiberInfo
				json.Unmarshal(must(a, "fibers", nil), &fibers)
				if len(fibers) == 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%s still runs %+v", a, fibers)
				}
			}
		}
	}

	// Every kind of event, written by the old release.
	must("old-chat", "chat", map[string]string{"text": "hello before the upgrade"})
	must("old-tools", "chat", map[string]string{"text": "/tool clock {}"})
	var ap chathost.Reply
	json.Unmarshal(must("old-approval", "chat", map[string]string{"text": `/tool note {"text":"please approve this"}`}), &ap)
	must("old-state", "state", map[string]any{"value": map[string]int{"n": 1}, "expectVersion": 0})
	must("old-state", "interrupt", map[string]any{"name": "turn"})
	must("old-state", "interrupt", map[string]any{"name": "turn", "clear": true})
	must("steps:old", "start", demo.StepsStart{Steps: 5, DelayMS: 10})
	json.Unmarshal(must("old-cancel", "chat", map[string]string{"text": "Tell me a long story"}), &ap)
	must("old-cancel", "cancel", nil)
	for i := range 12 { // past --compact-events: a snapshot, and a purge
		must("old-compact", "chat", map[string]string{"text": fmt.Sprintf("message %d", i)})
		waitIdle("old-compact")
	}
	waitIdle("old-chat", "old-tools", "old-approval", "steps:old", "old-cancel", "old-compact")
	var waiting struct {
		Messages []chat.Message `json:"messages"`
	}
	json.Unmarshal(must("old-approval", "messages", nil), &waiting)
	callID := ""
	for _, m := range waiting.Messages {
		for _, p := range m.Parts {
			if p.ToolCallID != "" {
				callID = p.ToolCallID
			}
		}
	}
	if callID == "" {
		t.Fatalf("no tool call waits for approval: %+v", waiting.Messages)
	}
	// What the old release reads, taken once it is settled: each agent
	// that chatted shows its messages, and two reads in a row agree. The
	// old release once answered a page with no messages for old-cancel
	// (its cancelled turn, and its user message, were in the log, and the
	// new release read them), most likely a node that took a partition's
	// lease before its views opened: this release takes leases only after
	// the event log opens. The comparison is of the stored conversations,
	// not of the old release's race.
	//
	// An agent whose last turn ends in an answer must show it: a turn
	// interrupted by a partition's handoff (the young cluster still
	// balancing) may list no fiber until its new owner recovers it, which
	// the old release did up to 10 s later, so "no fibers" and two equal
	// reads are not enough; a snapshot taken in that gap lacked the
	// answer the turn stored after the roll.
	before := map[string]string{}
	chatted := map[string]bool{"old-chat": true, "old-tools": true, "old-cancel": true, "old-compact": true}
	answered := map[string]bool{"old-chat": true, "old-tools": true, "old-compact": true}
	for _, a := range []string{"old-chat", "old-tools", "old-state", "old-cancel", "old-compact"} {
		waitfor.Within(t, 60*time.Second, func() error {
			first := string(must(a, "messages", nil))
			var page struct {
				Messages []chat.Message `json:"messages"`
			}
			json.Unmarshal([]byte(first), &page)
			if chatted[a] && len(page.Messages) == 0 {
				return fmt.Errorf("the old release reads no messages of %s", a)
			}
			if n := len(page.Messages); answered[a] && page.Messages[n-1].Role != chat.RoleAssistant {
				return fmt.Errorf("the old release shows no answer to %s's last message yet", a)
			}
			if again := string(must(a, "messages", nil)); again != first {
				return fmt.Errorf("two reads of %s's messages differ:\n%s\n%s", a, first, again)
			}
			before[a] = first
			return nil
		})
	}

	// Load through the roll: chats and fibers, each acknowledged one noted.
	stop := make(chan struct{})
	var mu sync.Mutex
	acked := map[string][]string{} // agent -> assistant message ids
	var wg sync.WaitGroup
	for w := range 3 {
		wg.Go(func() {
			agent := fmt.Sprintf("load%d", w)
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				out, err := cmd(agent, "chat", map[string]string{"text": fmt.Sprintf("during the upgrade %d", i)})
				if err != nil {
					continue // not acknowledged: nothing is owed
				}
				var r chathost.Reply
				json.Unmarshal(out, &r)
				mu.Lock()
				acked[agent] = append(acked[agent], r.MessageID)
				mu.Unlock()
				waitIdleQuiet := func() {
					for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) { // not a synchronisation: the interval of a poll on the agent's fibers done
						out, err := cmd(agent, "fibers", nil)
						if err == nil && string(out) == "[]" {
							return
						}
					}
				}
				waitIdleQuiet()
			}
		})
	}
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			cmd(fmt.Sprintf("steps:load%d", i%4), "start", demo.StepsStart{Steps: 20, DelayMS: 20})
			time.Sleep(300 * time.Millisecond) // not a synchronisation: pacing the load
		}
	})

	// The roll, highest ordinal first, as the StatefulSet does it.
	var oldLogs []string // the old release's output, node by node
	for i := len(nodes) - 1; i >= 0; i-- {
		nd := nodes[i]
		nd.proc.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-nd.proc.exited:
		case <-time.After(60 * time.Second):
			t.Fatalf("%s did not stop after SIGTERM:\n%s", nd.name, nd.proc.out.String())
		}
		oldLogs = append(oldLogs, nd.proc.out.String())
		nd.args = newArgs[nd]
		nd.start(t, newBin)
		waitReady(t, nd)
		time.Sleep(2 * time.Second) // not a synchronisation: the point, the upgraded node serves a while before the next
	}
	time.Sleep(2 * time.Second) // not a synchronisation: the load runs on the new release a while
	close(stop)
	wg.Wait()

	// Through the format switch: once every node runs this release the
	// cluster's active format (the tenant's too) reaches this release's,
	// agentd.RecordFormat, and a chat after it is stored in the new
	// records (packed chunks, --pack-chunks; the answer and usage in
	// turn.completed, format 8) and answered; verify below
	// reads both kinds. The nodes log the raise; the admin's credential
	// does not reach the cluster endpoint. An old release that already
	// wrote this format raised it before the roll, when the tenant was
	// created, and the new one has nothing to raise.
	raised := fmt.Sprintf(`"to":%d}`, agentd.RecordFormat)
	waitfor.Within(t, 90*time.Second, func() error {
		logs := slices.Clone(oldLogs)
		for _, nd := range nodes {
			logs = append(logs, nd.proc.out.String())
		}
		for _, out := range logs {
			for _, line := range strings.Split(out, "\n") {
				if strings.Contains(line, `"record format raised","tenant":"acme"`) && strings.Contains(line, raised) {
					return nil
				}
			}
		}
		return fmt.Errorf("no node logged the tenant's record format raised to %d, before the roll or after it", agentd.RecordFormat)
	})
	must("after-switch", "chat", map[string]string{"text": "/tool clock {}"})
	waitIdle("after-switch")
	var afterSwitch struct {
		Messages []chat.Message `json:"messages"`
	}
	json.Unmarshal(must("after-switch", "messages", nil), &afterSwitch)
	if n := len(afterSwitch.Messages); n != 2 || afterSwitch.Messages[1].Role != "assistant" {
		t.Errorf("a chat after the format switch: %d messages %+v", n, afterSwitch.Messages)
	}

	// The old conversations read the same on the new release.
	for a, want := range before {
		if got := string(must(a, "messages", nil)); got != want {
			t.Errorf("%s after the upgrade:\n%s\nwant\n%s", a, got, want)
		}
	}
	// The approval the old release asked for is answered by the new one.
	must("old-approval", "approve", map[string]any{"toolCallId": callID, "approved": true})
	// Every fiber ends; every acknowledged chat was answered.
	var agents []string
	for a := range acked {
		agents = append(agents, a)
	}
	waitIdle(append(agents, "old-approval", "steps:load0", "steps:load1", "steps:load2", "steps:load3")...)
	total := 0
	for a, ids := range acked {
		var page struct {
			Messages []chat.Message `json:"messages"`
		}
		json.Unmarshal(must(a, "messages", map[string]int{"limit": 1000}), &page)
		// A chat's reply names the assistant message its turn writes: it
		// is there once, after the user's.
		answered := map[string]bool{}
		for i, m := range page.Messages {
			if m.Role == "assistant" && i > 0 && page.Messages[i-1].Role == "user" {
				answered[m.ID] = true
			}
		}
		missing := 0
		for _, id := range ids {
			total++
			if !answered[id] {
				missing++
				t.Errorf("%s: acknowledged message %s has no answer after the upgrade", a, id)
			}
		}
		if missing > 0 {
			var roles []string
			for _, m := range page.Messages {
				roles = append(roles, m.Role+":"+m.ID)
			}
			t.Logf("%s: %d acknowledged, %d messages: %v", a, len(ids), len(page.Messages), roles)
		}
	}
	if total == 0 {
		t.Error("no chat was acknowledged during the upgrade")
	}
	t.Logf("%d chats acknowledged during the roll", total)
	// verify exits 1 on a violation: the lines are read either way.
	out, _ := exec.Command(newBin, "verify", "--server", "nats://"+nodes[0].nats, "--creds", admin).CombinedOutput()
	rep := string(out)
	var mine []string
	for _, line := range strings.Split(rep, "\n") {
		if strings.HasPrefix(line, "violation: ") {
			mine = append(mine, line)
		}
	}
	if strings.Count(rep, "tenant acme:") != 1 || len(mine) > 0 || strings.Count(rep, "\nok:")+strings.Count(rep, "violations:") != 2 {
		t.Errorf("verify after the upgrade (%d violations):\n%s", len(mine), rep)
	}
}

// knownFlags returns the flags of args that bin knows (its -h lists them):
// a flag this release added is left out for the previous one.
func knownFlags(t *testing.T, bin string, args []string) []string {
	t.Helper()
	out, _ := exec.Command(bin, "-h").CombinedOutput()
	var kept []string
	for _, a := range args {
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if strings.Contains(string(out), "\n  -"+name+" ") || strings.Contains(string(out), "\n  -"+name+"\n") {
			kept = append(kept, a)
		}
	}
	return kept
}

// rollClient is a client's connection to every node of a cluster
// through its roll, reconnecting without limit. It keeps what happened to
// the connection (disconnects, failed reconnects, errors, each with the
// server it concerned); a connection that closes anyway (nats.go closes
// one that a server refuses twice with the same authentication error) is
// logged with those events and opened again, so the roll's checks go on.
type rollClient struct {
	t    *testing.T
	urls string
	opts []nats.Option

	mu     sync.Mutex
	nc     *nats.Conn
	events []string
	closes int
}

func dialRoll(t *testing.T, urls string, opts ...nats.Option) *rollClient {
	c := &rollClient{t: t, urls: urls}
	c.opts = append(opts, nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond),
		nats.DisconnectErrHandler(func(nc *nats.Conn, err error) { c.add("disconnected from %s: %v", nc.ConnectedUrl(), err) }),
		nats.ReconnectHandler(func(nc *nats.Conn) { c.add("reconnected to %s", nc.ConnectedUrl()) }),
		nats.ReconnectErrHandler(func(nc *nats.Conn, err error) { c.add("a reconnect failed: %v", err) }),
		nats.ErrorHandler(func(nc *nats.Conn, _ *nats.Subscription, err error) {
			c.add("error from %s: %v", nc.ConnectedUrl(), err)
		}),
		nats.ClosedHandler(func(nc *nats.Conn) { c.add("closed, last error: %v", nc.LastError()) }))
	nc, err := nats.Connect(urls, c.opts...)
	if err != nil {
		t.Fatal(err)
	}
	c.nc = nc
	return c
}

func (c *rollClient) add(format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.events) == 200 {
		c.events = c.events[100:]
	}
	c.events = append(c.events, time.Now().Format("15:04:05.000 ")+fmt.Sprintf(format, args...))
}

// request is a request on the connection, opened again first when it
// closed.
func (c *rollClient) request(subj string, data []byte) (*nats.Msg, error) {
	c.mu.Lock()
	if c.nc.IsClosed() {
		c.closes++
		c.t.Logf("the client's connection closed (%d); its last events:\n%s", c.closes, strings.Join(c.events, "\n"))
		c.events = nil
		nc, err := nats.Connect(c.urls, c.opts...)
		if err != nil {
			c.mu.Unlock()
			return nil, err
		}
		c.nc = nc
	}
	nc := c.nc
	c.mu.Unlock()
	return nc.Request(subj, data, 20*time.Second)
}

func (c *rollClient) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.nc.Close()
}
