package main

import (
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/forever-agents/forever/agentd/chathost"
	"github.com/forever-agents/forever/chat"
)

// testBinaryFork runs on TestBinaryVerify's agentd: "agentd fork" gives a
// new agent the parent's messages up to --at; POST /v1/chat/{id}/fork onto
// an existing agent is a 409 sentence; new chats on each diverge; once the
// parent is deleted the fork's messages are unchanged and the log
// verifies.
func testBinaryFork(t *testing.T, bin string, c *crashClient, p *agentdProc, httpAddr, natsAddr string) {
	chatOn := func(agent, text string) {
		t.Helper()
		var reply chathost.Reply
		json.Unmarshal(c.command(agent, "chat", map[string]string{"text": text}), &reply)
		if reply.StreamID == "" {
			t.Fatalf("chat on %s: no stream", agent)
		}
		waitTerminal(t, c, p, agent, reply.StreamID)
	}
	messages := func(agent string) []string {
		t.Helper()
		var page struct{ Messages []chat.Message }
		json.Unmarshal(c.command(agent, "messages", nil), &page)
		var ids []string
		for _, m := range page.Messages {
			ids = append(ids, m.ID)
		}
		return ids
	}
	chatOn("fork-parent", "hello")
	chatOn("fork-parent", "again")
	parent := messages("fork-parent")
	if len(parent) != 4 {
		t.Fatalf("parent's messages: %v", parent)
	}

	out, code := runVerifyCmd(t, bin, "fork", "fork-parent", "--to", "fork-child", "--at", parent[1], "--server", "nats://"+natsAddr)
	if code != 0 || !strings.Contains(out, "fork-child: forked from fork-parent") {
		t.Fatalf("agentd fork: exit %d\n%s", code, out)
	}
	if got := messages("fork-child"); !slices.Equal(got, parent[:2]) {
		t.Fatalf("the fork's messages %v, want the parent's first two %v", got, parent[:2])
	}
	resp, err := http.Post("http://"+httpAddr+"/v1/chat/fork-parent/fork", "application/json", strings.NewReader(`{"to":"fork-child"}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusConflict || !strings.Contains(string(body), `"code":409`) || !strings.Contains(string(body), "already exists") {
		t.Errorf("POST fork onto an existing agent: %d %s", resp.StatusCode, body)
	}

	chatOn("fork-child", "another way")
	chatOn("fork-parent", "on we go")
	child := messages("fork-child")
	if len(child) != 4 || !slices.Equal(child[:2], parent[:2]) || slices.Contains(messages("fork-parent"), child[2]) {
		t.Fatalf("after a chat on each: fork %v, parent %v", child, messages("fork-parent"))
	}

	c.command("fork-parent", "delete", nil)
	if got := messages("fork-child"); !slices.Equal(got, child) {
		t.Fatalf("the fork's messages after the parent's delete: %v, want %v", got, child)
	}
	verifyLog(t, c)
}
