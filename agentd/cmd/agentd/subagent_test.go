package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/forever-agents/forever/agentd/agentdtest"
	"github.com/forever-agents/forever/agentd/chathost"
	"github.com/forever-agents/forever/agentd/host"
	"github.com/forever-agents/forever/agents"
	"github.com/forever-agents/forever/chat"
	"github.com/forever-agents/forever/chat/chunk"
	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/internal/waitfor"
)

// subagentPrompt makes the local model call kid-a and kid-b in one step
// (a story each: long enough to be killed in) and kid-c in the next.
const subagentPrompt = "/agent kid-a tell me a story\n+/agent kid-b tell me a story please\n/agent kid-c hello"

// childTurnsByCall counts the child's turn.started events by the parent
// call that started them.
func childTurnsByCall(c *crashClient, child string) map[string]int {
	out := map[string]int{}
	for _, e := range c.events(child) {
		if e.Type != chat.EventTurnStarted {
			continue
		}
		var d struct{ Parent *chat.ParentRef }
		json.Unmarshal(e.Data, &d)
		if d.Parent != nil {
			out[d.Parent.Agent+"/"+d.Parent.CallID]++
		}
	}
	return out
}

// childOutputsOf returns the agent tool's outputs in the parent's one
// assistant message, checking the history holds just the question and it,
// and that it names each child in a data-subagent part.
func childOutputsOf(t *testing.T, c *crashClient, parent string) []chat.ChildOutput {
	t.Helper()
	checkOneAssistant(t, c, parent)
	var page struct{ Messages []chat.Message }
	json.Unmarshal(c.command(parent, "messages", nil), &page)
	if len(page.Messages) != 2 {
		t.FailNow()
	}
	var outs []chat.ChildOutput
	named := map[string]bool{}
	for _, p := range page.Messages[1].Parts {
		switch {
		case p.Type == chat.PartTool && p.ToolName == chat.AgentToolName:
			if p.State != chat.ToolOutput {
				t.Errorf("agent call %s: %s %q", p.ToolCallID, p.State, p.ErrorText)
				continue
			}
			var o chat.ChildOutput
			json.Unmarshal(p.Output, &o)
			outs = append(outs, o)
		case p.Type == chat.PartSubagent:
			named[p.ID] = true
		}
	}
	for _, o := range outs {
		if !named[o.CallID] {
			t.Errorf("call %s to %s has no data-subagent part", o.CallID, o.Agent)
		}
	}
	return outs
}

// checkChildrenOnce checks that each output quotes its child's one
// answer, and that each child's turn was started once per parent call.
func checkChildrenOnce(t *testing.T, c *crashClient, parent string, outs []chat.ChildOutput, kids ...string) {
	t.Helper()
	if len(outs) != len(kids) {
		t.Fatalf("%d child outputs, want %d: %+v", len(outs), len(kids), outs)
	}
	for i, kid := range kids {
		o := outs[i]
		if o.Agent != kid || o.Status != chat.LinkCompleted || o.Text == "" {
			t.Errorf("output %d = %+v, want %s's answer", i, o, kid)
		}
		var page struct{ Messages []chat.Message }
		json.Unmarshal(c.command(kid, "messages", nil), &page)
		if len(page.Messages) != 2 || page.Messages[1].Text() != o.Text {
			t.Errorf("%s answered %d messages; the parent got %q", kid, len(page.Messages), o.Text)
		}
		if n := childTurnsByCall(c, kid)[parent+"/"+o.CallID]; n != 1 {
			t.Errorf("%s: turn.started %d times for call %s, want once", kid, n, o.CallID)
		}
	}
}

// testBinarySubagents: the agent tool through the built binary and the
// local model.
func testBinarySubagents(t *testing.T, bin string) {
	start := func(t *testing.T, data, httpAddr, natsAddr string, extra ...string) *agentdProc {
		p := &agentdProc{out: &agentdtest.SyncBuffer{}, exited: make(chan error, 1)}
		args := append([]string{"--data", data, "--http", httpAddr, "--nats-listen", natsAddr, "--log-format", "json", "--local-rate", "60"}, extra...)
		p.cmd = exec.Command(bin, args...)
		p.cmd.Env = os.Environ()
		p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
		return startWith(t, p, httpAddr)
	}

	// Two children in one step and one in a later step: one assistant
	// message holding their answers, each child answering once.
	t.Run("TwoThenOne", func(t *testing.T) {
		data := filepath.Join(t.TempDir(), "data")
		httpAddr, natsAddr := agentdtest.FreeAddr(t), agentdtest.FreeAddr(t)
		p := start(t, data, httpAddr, natsAddr, "--local-rate", "400")
		c := dialAgentd(t, natsAddr)
		var reply chathost.Reply
		json.Unmarshal(c.command("boss", "chat", map[string]string{"text": subagentPrompt}), &reply)
		chunks := waitStreamEnd(t, c, "boss", reply.StreamID)
		if n := countChunks(chunks, chat.PartSubagent); n != 6 {
			t.Errorf("%d data-subagent chunks, want 6 (each child running, then ended)", n)
		}
		checkChildrenOnce(t, c, "boss", childOutputsOf(t, c, "boss"), "kid-a", "kid-b", "kid-c")
		var st host.Status
		json.Unmarshal(c.command("boss", "status", nil), &st)
		detail, _ := json.Marshal(st.Detail)
		if strings.Contains(string(detail), `"children"`) {
			t.Errorf("status after the turn lists children: %s", detail)
		}
		// The agents view lists the children (the meta verb answers the
		// parent's entry).
		var entry agents.Entry
		json.Unmarshal(c.command("boss", "meta", nil), &entry)
		var kids []string
		for _, k := range entry.Children {
			if k.Status != chat.LinkCompleted || k.Type != "chat" || k.Mode != chat.ModePersistent {
				t.Errorf("listed child %+v, want a completed persistent chat agent", k)
			}
			kids = append(kids, k.Agent)
		}
		if slices.Sort(kids); !slices.Equal(kids, []string{"kid-a", "kid-b", "kid-c"}) {
			t.Errorf("listed children %v, want kid-a, kid-b, kid-c", kids)
		}
		verifyLog(t, c)
		if t.Failed() {
			t.Logf("agentd output:\n%s", p.out.String())
		}
	})

	// SIGKILL while the children of the first step stream, then restart:
	// the same outcome, each child's turn started once per parent call.
	t.Run("Crash", func(t *testing.T) {
		data := filepath.Join(t.TempDir(), "data")
		httpAddr, natsAddr := agentdtest.FreeAddr(t), agentdtest.FreeAddr(t)
		p := start(t, data, httpAddr, natsAddr)
		c := dialAgentd(t, natsAddr)
		var reply chathost.Reply
		json.Unmarshal(c.command("boss", "chat", map[string]string{"text": subagentPrompt}), &reply)
		// status shows the two children of the first step in flight.
		waitChildren(t, c, "boss", 2)
		// Wait until a child streams: its stream is named in the parent's.
		var child chat.ChildRef
		waitfor.True(t, "a child streaming", func() bool {
			for _, ch := range c.streamChunks("boss", reply.StreamID) {
				if ch.Type == chat.PartSubagent && child.StreamID == "" {
					json.Unmarshal(ch.Data, &child)
				}
			}
			return child.StreamID != "" && len(textOf(c.streamChunks(child.Agent, child.StreamID))) >= 40
		})
		before := c.streamChunks(child.Agent, child.StreamID)
		p.kill()
		if before[len(before)-1].Terminal() {
			t.Fatal("the child ended before the kill")
		}
		p = start(t, data, httpAddr, natsAddr)
		waitStreamEnd(t, c, "boss", reply.StreamID)
		checkChildrenOnce(t, c, "boss", childOutputsOf(t, c, "boss"), "kid-a", "kid-b", "kid-c")
		verifyLog(t, c)
		if t.Failed() {
			t.Logf("agentd output:\n%s", p.out.String())
		}
	})

	// A stop of the parent (POST /v1/chat/{id}/stop) stops its running
	// child, which ends interrupted, and its stream gets one abort; a cycle is refused
	// with a tool error; the parent waits deactivated and resumes.
	t.Run("CancelCycleIdle", func(t *testing.T) {
		data := filepath.Join(t.TempDir(), "data")
		httpAddr, natsAddr := agentdtest.FreeAddr(t), agentdtest.FreeAddr(t)
		p := start(t, data, httpAddr, natsAddr, "--idle-timeout", "300ms")
		c := dialAgentd(t, natsAddr)

		t.Run("Cancel", func(t *testing.T) {
			// The console, started first: it shows the waiting parent's
			// child, then the parent's row links to its children.
			ctx := browser(t, chromiumPath(t))
			console := "http://" + httpAddr + "/console"
			if err := chromedp.Run(ctx, chromedp.Navigate(console)); err != nil {
				t.Fatalf("console: %v", err)
			}
			var reply chathost.Reply
			json.Unmarshal(c.command("stopper", "chat", map[string]string{"text": "/agent teller tell me a story"}), &reply)
			waitLinks(t, c, "stopper", 1)
			err := chromedp.Run(ctx,
				chromedp.Navigate(console+"#/agent/stopper"),
				chromedp.WaitVisible(`#childcard tr[data-child="teller"][data-waiting] a[href="#/agent/teller"]`, chromedp.ByQuery),
				chromedp.WaitVisible(`#waiting a[href="#/agent/teller"]`, chromedp.ByQuery),
			)
			if err != nil {
				t.Errorf("console: the waiting parent's child: %v", err)
			}
			// The chat page's and useChat's Stop: POST /v1/chat/{id}/stop.
			resp, err := http.Post("http://"+httpAddr+"/v1/chat/stopper/stop", "application/json", nil)
			if err != nil {
				t.Fatal(err)
			}
			var stopped struct{ Stopped bool }
			json.NewDecoder(resp.Body).Decode(&stopped)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK || !stopped.Stopped {
				t.Errorf("POST stop: %d %+v, want 200 and stopped", resp.StatusCode, stopped)
			}
			chunks := waitTerminalFor(t, c, p, "stopper", reply.StreamID, waitfor.Bound)
			if got := terminals(chunks); len(got) != 1 || got[0] != chunk.Abort {
				t.Errorf("the parent's stream's terminal chunks are %v, want one abort", got)
			}
			waitTurnStatus(t, c, "teller", chat.EventTurnInterrupted)
			if got := terminals(onlyStreamEnd(t, c, "teller")); len(got) != 1 || got[0] != chunk.Abort {
				t.Errorf("the child's stream's terminal chunks are %v, want one abort", got)
			}
			// The parent's watchers got the child's progress, stored: a
			// watcher that comes now reads it from the start.
			links := subagentBroadcasts(t, httpAddr, "stopper", 2)
			if len(links) != 2 || links[0].Event != chat.EventSubagentStarted || links[0].Status != chat.LinkRunning ||
				links[1].Event != chat.EventSubagentEnded || links[1].Status != chat.LinkCancelled ||
				links[0].Agent != "teller" || links[1].StreamID == "" || links[1].ParentRequestID != reply.RequestID {
				t.Errorf("the parent's sub-agent broadcasts: %+v, want teller started (running) then ended (cancelled) in turn %s", links, reply.RequestID)
			}
			err = chromedp.Run(ctx,
				chromedp.Navigate(console+"#/"),
				chromedp.Click(`a[data-children="stopper"]`, chromedp.ByQuery),
				chromedp.WaitVisible(`#parent`, chromedp.ByQuery),
				chromedp.WaitVisible(`tr[data-agent="teller"]`, chromedp.ByQuery),
			)
			var rows int
			chromedp.Run(ctx, chromedp.Evaluate(`document.querySelectorAll('tr[data-agent]').length`, &rows))
			if err != nil || rows != 1 {
				t.Errorf("console: the parent's children list: %v, %d rows, want teller alone", err, rows)
			}
			for _, e := range c.events("stopper") {
				if e.Type == chat.EventSubagentEnded && !strings.Contains(string(e.Data), `"status":"cancelled"`) {
					t.Errorf("link ended %s, want cancelled", e.Data)
				}
			}
		})

		t.Run("Cycle", func(t *testing.T) {
			var reply chathost.Reply
			json.Unmarshal(c.command("looper", "chat", map[string]string{"text": "/agent looper hello me"}), &reply)
			waitStreamEnd(t, c, "looper", reply.StreamID)
			var page struct{ Messages []chat.Message }
			json.Unmarshal(c.command("looper", "messages", nil), &page)
			m := page.Messages[len(page.Messages)-1]
			if !strings.Contains(m.Text(), "The agent tool failed: cycle: agent looper is already in the chain of calls (looper -> looper)") {
				t.Errorf("answer %q, want the cycle refused", m.Text())
			}
		})

		// A child deleted while its parent waits: the call fails with a
		// tool error and the parent completes; verify notes the link.
		t.Run("ChildDeleted", func(t *testing.T) {
			var reply chathost.Reply
			json.Unmarshal(c.command("asker", "chat", map[string]string{"text": "/agent goner tell me a story"}), &reply)
			waitLinks(t, c, "asker", 1)
			c.command("goner", "delete", nil)
			waitStreamEnd(t, c, "asker", reply.StreamID)
			var page struct{ Messages []chat.Message }
			json.Unmarshal(c.command("asker", "messages", nil), &page)
			if m := page.Messages[len(page.Messages)-1]; !strings.Contains(m.Text(), "agent goner was deleted before it answered") {
				t.Errorf("answer %q, want the child deleted", m.Text())
			}
		})

		t.Run("Deactivated", func(t *testing.T) {
			var reply chathost.Reply
			json.Unmarshal(c.command("sleeper", "chat", map[string]string{"text": "/agent dreamer tell me a story"}), &reply)
			waitLinks(t, c, "sleeper", 1)
			// The waiting parent holds no keepalive: it is deactivated
			// while the child still streams; its status, read from the
			// views, still shows the child in flight.
			var st struct {
				Active bool
				Detail struct{ Children []chat.ChildLink }
			}
			waitfor.NoError(t, func() error {
				st.Detail.Children = nil
				json.Unmarshal(c.command("sleeper", "status", nil), &st)
				var child host.Status
				json.Unmarshal(c.command("dreamer", "status", nil), &child)
				if st.Active || !child.Active {
					return fmt.Errorf("the waiting parent to be deactivated, its child active: %+v\n%s", st, p.out.String())
				}
				return nil
			})
			if len(st.Detail.Children) != 1 || st.Detail.Children[0].Agent != "dreamer" {
				t.Errorf("status of the deactivated parent: children %+v, want dreamer", st.Detail.Children)
			}
			waitStreamEnd(t, c, "sleeper", reply.StreamID)
			checkChildrenOnce(t, c, "sleeper", childOutputsOf(t, c, "sleeper"), "dreamer")
		})
		verifyLog(t, c)
		if t.Failed() {
			t.Logf("agentd output:\n%s", p.out.String())
		}
	})
}

// waitChildren waits until the parent's status (the parent active) shows
// n children in flight.
func waitChildren(t *testing.T, c *crashClient, parent string, n int) []chat.ChildLink {
	t.Helper()
	var st struct {
		Detail struct{ Children []chat.ChildLink }
	}
	waitfor.NoError(t, func() error {
		st.Detail.Children = nil
		json.Unmarshal(c.command(parent, "status", nil), &st)
		if len(st.Detail.Children) != n {
			return fmt.Errorf("%s to have %d children in flight: %+v", parent, n, st)
		}
		return nil
	})
	return st.Detail.Children
}

// waitLinks waits until the parent recorded n links (subagent.started)
// and returns them: the log, whether the parent is active or not.
func waitLinks(t *testing.T, c *crashClient, parent string, n int) []chat.ChildLink {
	t.Helper()
	var links []chat.ChildLink
	waitfor.True(t, fmt.Sprintf("%s to record %d links", parent, n), func() bool {
		links = nil
		for _, e := range c.events(parent) {
			if e.Type == chat.EventSubagentStarted {
				var l chat.ChildLink
				json.Unmarshal(e.Data, &l)
				links = append(links, l)
			}
		}
		return len(links) >= n
	})
	return links
}

// waitTurnStatus waits until the agent's log holds the turn outcome event
// typ (chat.EventTurn*).
func waitTurnStatus(t *testing.T, c *crashClient, agent, typ string) {
	t.Helper()
	waitfor.True(t, agent+" to record "+typ, func() bool {
		return slices.ContainsFunc(c.events(agent), func(e eventlog.Event) bool { return e.Type == typ })
	})
}

// testClusterSubagent: on the 3-node cluster, a parent and its child on
// different nodes; the child's owner is SIGKILLed mid-turn; the parent
// still completes once, its child's turn started once.
func testClusterSubagent(t *testing.T, c *crashClient, nodes []*clusterNode) {
	const parent = "chief"
	pOwner := ownerOf(c, parent).Owner
	child := ""
	for i := range 100 {
		id := fmt.Sprintf("helper%d", i)
		if ownerOf(c, id).Owner != pOwner {
			child = id
			break
		}
	}
	if child == "" {
		t.Fatal("no agent id owned by another node than the parent's")
	}
	victim := nodeNamed(nodes, ownerOf(c, child).Owner)
	t.Logf("parent %s on %s, child %s on %s", parent, pOwner, child, victim.name)
	var reply chathost.Reply
	json.Unmarshal(c.command(parent, "chat", map[string]string{"text": "/agent " + child + " tell me a story"}), &reply)
	links := waitLinks(t, c, parent, 1)
	waitfor.True(t, "the child to stream", func() bool { return len(textOf(c.streamChunks(child, links[0].StreamID))) >= 40 })
	before := c.streamChunks(child, links[0].StreamID)
	victim.proc.kill()
	if before[len(before)-1].Terminal() {
		t.Fatal("the child ended before its owner was killed")
	}
	if _, ok := streamEnded(c, parent, reply.StreamID, 3*time.Minute); !ok {
		// What each side reached, for the next run that gets here: the
		// failover, the child's recovered turn, or the parent's wait.
		for _, a := range []string{parent, child} {
			t.Logf("%s: status %s", a, c.command(a, "status", nil))
			for _, e := range c.events(a) {
				t.Logf("  %s seq %d %s by %s/%d", e.Time.Format("15:04:05.000"), e.Seq, e.Type, e.Writer.Node, e.Writer.Epoch)
			}
		}
		for _, nd := range nodes {
			if nd != victim {
				t.Logf("%s /readyz: %s", nd.name, nd.readyz())
			}
		}
		t.Fatalf("stream %s of %s did not end within 3 minutes of the child's owner's SIGKILL", reply.StreamID, parent)
	}
	waitStreamEnd(t, c, parent, reply.StreamID)
	checkChildrenOnce(t, c, parent, childOutputsOf(t, c, parent), child)
	if now := ownerOf(c, child).Owner; now == victim.name {
		t.Errorf("the child is still owned by the killed node")
	}
}

// subagentBroadcasts reads an agent's events from the start (GET
// /v1/agents/{id}/events?after=0) until n sub-agent progress broadcasts
// came (or 20 s passed), and returns them.
func subagentBroadcasts(t *testing.T, httpAddr, agent string, n int) []chathost.SubagentLink {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+httpAddr+"/v1/agents/"+agent+"/events?after=0", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out []chathost.SubagentLink
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for len(out) < n && sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data:")
		if !ok {
			continue
		}
		var msg struct {
			Type string
			Data chathost.SubagentProgress
		}
		if json.Unmarshal([]byte(strings.TrimSpace(data)), &msg) == nil && msg.Type == "broadcast" && msg.Data.Subagent.Event != "" {
			out = append(out, msg.Data.Subagent)
		}
	}
	return out
}
