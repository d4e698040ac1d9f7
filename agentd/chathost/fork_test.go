package chathost

import (
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/forever-agents/forever/agentd"
	"github.com/forever-agents/forever/agentd/agentdtest"
	"github.com/forever-agents/forever/agentd/host"
	"github.com/forever-agents/forever/chat"
)

// TestFork: the fork verb over NATS and POST /v1/chat/{id}/fork gives a new
// agent the parent's messages up to at; new chats on each diverge; a fork
// onto an existing agent is 409, of an unknown parent 404, at an unknown
// message 400; deleting the parent leaves the fork whole.
func TestFork(t *testing.T) {
	d, chats := newChatDaemon(t, agentdtest.Config(t), -1, func(d *agentd.Daemon, h *host.Host, ct *Type) error {
		if err := h.SetForking("chat", ct.Forking()); err != nil {
			return err
		}
		return AttachReads(d, h)
	})
	agentdtest.Start(t, d)
	agentdtest.WaitStatus(t, "http://"+d.HTTPAddr()+"/readyz", 200)
	nc, err := nats.Connect(d.NATSURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	cmd := func(agent, verb, payload string) (int, []byte) {
		t.Helper()
		resp, err := nc.Request("forever.cmd."+agent+"."+verb, []byte(payload), 10*time.Second)
		if err != nil {
			t.Fatalf("%s %s: %v", verb, agent, err)
		}
		if c := resp.Header.Get("Nats-Service-Error-Code"); c != "" {
			return map[string]int{"400": 400, "404": 404, "409": 409}[c], []byte(resp.Header.Get("Nats-Service-Error"))
		}
		return 200, resp.Data
	}
	messages := func(agent string) []chat.Message {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			if _, active, err := chats.Store().ActiveTurn(agent); err == nil && !active {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: turn still active", agent)
			}
			time.Sleep(10 * time.Millisecond)
		}
		msgs, _, err := chats.Store().Messages(agent, chat.Page{})
		if err != nil {
			t.Fatal(err)
		}
		return msgs
	}
	ids := func(ms []chat.Message) []string {
		var out []string
		for _, m := range ms {
			out = append(out, m.ID)
		}
		return out
	}
	for _, text := range []string{"one", "two"} {
		if code, body := cmd("p", "chat", `{"text":"`+text+`"}`); code != 200 {
			t.Fatalf("chat: %d %s", code, body)
		}
		messages("p")
	}
	pmsgs := messages("p")
	if len(pmsgs) != 4 {
		t.Fatalf("parent: %d messages", len(pmsgs))
	}

	code, body := cmd("p", "fork", `{"to":"f","at":"`+pmsgs[1].ID+`"}`)
	var rep host.ForkReply
	if code != 200 || json.Unmarshal(body, &rep) != nil || rep.Agent != "f" || rep.Parent != "p" || rep.Messages != 2 {
		t.Fatalf("fork: %d %s", code, body)
	}
	if got, want := ids(messages("f")), ids(pmsgs[:2]); !slices.Equal(got, want) {
		t.Fatalf("fork's messages %v, want %v", got, want)
	}
	for _, c := range []struct{ name, agent, payload, want string }{
		{"onto an existing agent", "p", `{"to":"f"}`, "409"},
		{"onto its parent", "p", `{"to":"p"}`, "400"},
		{"of an unknown parent", "nobody", `{"to":"g"}`, "404"},
		{"at an unknown message", "p", `{"to":"g","at":"nope"}`, "400"},
		{"without to", "p", `{}`, "400"},
	} {
		code, body := cmd(c.agent, "fork", c.payload)
		if got := map[int]string{400: "400", 404: "404", 409: "409", 200: "200"}[code]; got != c.want {
			t.Errorf("fork %s: %d %s, want %s", c.name, code, body, c.want)
		}
		if strings.Contains(string(body), "agentd:") || strings.Contains(string(body), "chat:") {
			t.Errorf("fork %s: the error names a package: %s", c.name, body)
		}
	}

	url := "http://" + d.HTTPAddr() + "/v1/chat/p/fork"
	for _, c := range []struct {
		body string
		want int
	}{{`{"to":"h"}`, 200}, {`{"to":"h"}`, 409}, {`{"to":1}`, 400}} {
		resp, err := http.Post(url, "application/json", strings.NewReader(c.body))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.want || c.want != 200 && !strings.Contains(string(b), `"code":`) {
			t.Errorf("POST fork %s: %d %s, want %d", c.body, resp.StatusCode, b, c.want)
		}
	}
	if got, want := ids(messages("h")), ids(pmsgs); !slices.Equal(got, want) {
		t.Fatalf("whole fork's messages %v, want %v", got, want)
	}

	if code, body := cmd("f", "chat", `{"text":"three"}`); code != 200 {
		t.Fatalf("chat on the fork: %d %s", code, body)
	}
	if code, body := cmd("p", "chat", `{"text":"four"}`); code != 200 {
		t.Fatalf("chat on the parent: %d %s", code, body)
	}
	fmsgs, pafter := messages("f"), messages("p")
	if len(fmsgs) != 4 || fmsgs[2].Text() != "three" || len(pafter) != 6 || pafter[4].Text() != "four" {
		t.Fatalf("after a chat on each: fork %v, parent %v", ids(fmsgs), ids(pafter))
	}

	// A fork of the fork, before the parent goes: deleting the parent
	// detaches f, and g first, whose log reads f's history.
	if code, body := cmd("f", "fork", `{"to":"g"}`); code != 200 {
		t.Fatalf("fork of a fork: %d %s", code, body)
	}
	firstEvent := func(agent string) string {
		t.Helper()
		code, body := cmd(agent, "log", `{"limit":1}`)
		var page host.LogPage
		if code != 200 || json.Unmarshal(body, &page) != nil || len(page.Events) == 0 {
			t.Fatalf("log of %s: %d %s", agent, code, body)
		}
		return page.Events[0].Type
	}
	if got := firstEvent("g"); got != "agent.forked" {
		t.Fatalf("the fork's log starts with %s, want agent.forked", got)
	}

	if code, body := cmd("p", "delete", ``); code != 200 {
		t.Fatalf("delete the parent: %d %s", code, body)
	}
	if got, want := ids(messages("f")), ids(fmsgs); !slices.Equal(got, want) {
		t.Fatalf("fork after the parent's delete: %v, want %v", got, want)
	}
	if got, want := ids(messages("h")), ids(pmsgs); !slices.Equal(got, want) {
		t.Fatalf("whole fork after the parent's delete: %v, want %v", got, want)
	}
	if got, want := ids(messages("g")), ids(fmsgs); !slices.Equal(got, want) {
		t.Fatalf("fork of the fork after the parent's delete: %v, want %v", got, want)
	}
	for _, agent := range []string{"f", "g", "h"} {
		if got := firstEvent(agent); got != "log.snapshot" {
			t.Errorf("%s's log starts with %s after the parent's delete, want its snapshot", agent, got)
		}
	}
	if code, body := cmd("f", "chat", `{"text":"five"}`); code != 200 {
		t.Fatalf("chat on the fork after the parent's delete: %d %s", code, body)
	}
	if got := messages("f"); len(got) != 6 {
		t.Fatalf("fork after a chat: %v", ids(got))
	}
}
