package chathost

import (
	"context"
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
	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/verify"
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
		waitTurnEnded(t, chats, agent)
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

// TestForkAcrossNodes: two nodes share one JetStream; a fork of an agent
// the first node owns onto an id the second owns is made and owned there,
// its messages are the parent's, and the parent's delete on the first node
// has the second detach it (its log then starts with its snapshot).
func TestForkAcrossNodes(t *testing.T) {
	forking := func(d *agentd.Daemon, h *host.Host, ct *Type) error { return h.SetForking("chat", ct.Forking()) }
	c1 := agentdtest.Config(t)
	c1.ServerName, c1.LeaseTTL = "n1", 3*time.Second
	d1, chats1 := newChatDaemon(t, c1, -1, forking)
	agentdtest.Start(t, d1)
	agentdtest.WaitStatus(t, "http://"+d1.HTTPAddr()+"/readyz", 200)
	c2 := agentdtest.Config(t)
	c2.ServerName, c2.NATSListen, c2.NATSURL, c2.LeaseTTL = "n2", "", d1.NATSURL(), 3*time.Second
	d2, chats2 := newChatDaemon(t, c2, -1, forking)
	agentdtest.Start(t, d2)
	agentdtest.WaitStatus(t, "http://"+d2.HTTPAddr()+"/readyz", 200)
	nc, err := nats.Connect(d1.NATSURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()

	owners := spreadOwners(t, nc, "x") // node: an agent id it owns
	parent, fork := owners["n1"], owners["n2"]
	chatDone(t, nc, parent, "hello")
	pmsgs, _, err := chats1.Store().Messages(parent, chat.Page{})
	if err != nil || len(pmsgs) != 2 {
		t.Fatalf("parent's messages: %d, %v", len(pmsgs), err)
	}
	var rep host.ForkReply
	command(t, nc, parent, "fork", `{"to":"`+fork+`"}`, &rep)
	if rep.Messages != 2 {
		t.Fatalf("fork reply %+v", rep)
	}
	var st host.Status
	command(t, nc, fork, "status", ``, &st)
	if st.Owner != "n2" {
		t.Errorf("the fork is owned by %s, want n2 (its own id's owner)", st.Owner)
	}
	var page struct{ Messages []chat.Message }
	command(t, nc, fork, "messages", ``, &page)
	if len(page.Messages) != 2 || page.Messages[0].ID != pmsgs[0].ID || page.Messages[1].ID != pmsgs[1].ID {
		t.Fatalf("the fork's messages %+v, want the parent's", page.Messages)
	}
	command(t, nc, parent, "delete", ``, nil)
	var log host.LogPage
	command(t, nc, fork, "log", `{"limit":1}`, &log)
	if len(log.Events) != 1 || log.Events[0].Type != "log.snapshot" {
		t.Errorf("the fork's log after the parent's delete starts with %+v, want its snapshot", log.Events)
	}
	for _, s := range []*Type{chats1, chats2} {
		msgs, _, err := s.Store().Messages(fork, chat.Page{})
		if err != nil || len(msgs) != 2 {
			t.Errorf("the fork's messages on a node after the parent's delete: %d, %v", len(msgs), err)
		}
	}
}

// TestForkParentDeletedMeanwhile: a fork whose agent.forked is stored after
// its parent's delete listed the forks (here: the fork command holds, past
// its checks, until the delete is done) must not be left reading a history
// that is gone. It is undone and answered 409, the fork's id stays free,
// and verify is clean; a fork made after the delete is 404.
func TestForkParentDeletedMeanwhile(t *testing.T) {
	hold, deleted := make(chan struct{}), make(chan struct{})
	d, chats := newChatDaemon(t, agentdtest.Config(t), -1, func(d *agentd.Daemon, h *host.Host, ct *Type) error {
		f := ct.Forking()
		point := f.Point
		f.Point = func(ctx context.Context, parent, at string) (uint64, error) {
			n, err := point(ctx, parent, at)
			if parent == "p" {
				close(hold) // checked the parent, read its sequence
				<-deleted
			}
			return n, err
		}
		if err := h.SetForking("chat", f); err != nil {
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
	cmd := func(agent, verb, payload string) (string, []byte) {
		resp, err := nc.Request("forever.cmd."+agent+"."+verb, []byte(payload), 20*time.Second)
		if err != nil {
			return "error", []byte(err.Error())
		}
		return resp.Header.Get("Nats-Service-Error-Code"), []byte(resp.Header.Get("Nats-Service-Error") + string(resp.Data))
	}
	if code, body := cmd("p", "chat", `{"text":"one"}`); code != "" {
		t.Fatalf("chat: %s %s", code, body)
	}
	waitTurnEnded(t, chats, "p")
	type result struct {
		code string
		body []byte
	}
	forked := make(chan result, 1)
	go func() {
		code, body := cmd("p", "fork", `{"to":"f"}`)
		forked <- result{code, body}
	}()
	<-hold
	if code, body := cmd("p", "delete", ``); code != "" {
		t.Fatalf("delete the parent: %s %s", code, body)
	}
	close(deleted)
	r := <-forked
	if r.code != "409" || !strings.Contains(string(r.body), "was being deleted while it was forked") {
		msgs, _, _ := chats.Store().Messages("f", chat.Page{})
		t.Fatalf("fork racing the parent's delete: %q %s; the fork holds %d messages", r.code, r.body, len(msgs))
	}
	if msgs, _, err := chats.Store().Messages("f", chat.Page{}); err != nil || len(msgs) != 0 {
		t.Fatalf("the undone fork's messages: %d %v", len(msgs), err)
	}
	if code, body := cmd("p", "fork", `{"to":"f2"}`); code != "404" {
		t.Fatalf("fork of the deleted parent: %s %s", code, body)
	}
	// The fork's id is free: a new agent starts empty there.
	if code, body := cmd("f", "chat", `{"text":"again"}`); code != "" {
		t.Fatalf("chat on the undone fork's id: %s %s", code, body)
	}
	lg, err := eventlog.Open(t.Context(), eventlog.Config{Conn: nc, Bind: true})
	if err != nil {
		t.Fatal(err)
	}
	if rep, err := verify.Check(t.Context(), lg, verify.Options{}); err != nil || !rep.OK() {
		t.Fatalf("verify: %v\n%s", err, rep)
	}
}
