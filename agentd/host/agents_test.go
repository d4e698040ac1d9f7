package host_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/forever-agents/forever/agentd"
	"github.com/forever-agents/forever/agentd/agentdtest"
	"github.com/forever-agents/forever/agentd/demo"
	"github.com/forever-agents/forever/agentd/host"
	"github.com/forever-agents/forever/agents"
	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/verify"
)

// caster is an agent type that broadcasts the payload of "cast" and keeps
// an in-memory state that "state" replaces, published like a chat
// agent's.
type caster struct {
	env *host.Env
	mu  sync.Mutex
	ver int
	val json.RawMessage
}

func (c *caster) HandleCommand(ctx context.Context, cmd host.Command) (any, error) {
	switch cmd.Verb {
	case "cast":
		return map[string]bool{"ok": true}, c.env.Broadcast(ctx, cmd.Data)
	case "state":
		c.mu.Lock()
		defer c.mu.Unlock()
		c.ver++
		c.val = cmd.Data
		return map[string]int{"version": c.ver}, c.env.PublishState(c.ver, cmd.Data)
	}
	return nil, fmt.Errorf("%w: %s", host.ErrNotFound, cmd.Verb)
}

// casters are the caster agents built, and their state source.
type casters struct {
	mu sync.Mutex
	m  map[string]*caster
}

func (cs *casters) factory(_ context.Context, env *host.Env) (host.Agent, error) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	c := &caster{env: env}
	cs.m[env.ID] = c
	return c, nil
}

func (cs *casters) State(_ context.Context, agent string) (json.RawMessage, int, error) {
	cs.mu.Lock()
	c := cs.m[agent]
	cs.mu.Unlock()
	if c == nil {
		return nil, 0, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.val, c.ver, nil
}

// startAgentsHost runs a daemon with the steps type and the caster type
// (the default), and the agents HTTP endpoints.
func startAgentsHost(t *testing.T, cfg agentd.Config) (*agentd.Daemon, *host.Host, *nats.Conn) {
	t.Helper()
	d, err := agentd.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h := host.New(host.Config{DefaultType: "caster"})
	if err := h.Register("steps", demo.NewStepsAgent, demo.StepsVerbs...); err != nil {
		t.Fatal(err)
	}
	cs := &casters{m: map[string]*caster{}}
	if err := h.Register("caster", cs.factory, "cast", "state"); err != nil {
		t.Fatal(err)
	}
	if err := h.Attach(d); err != nil {
		t.Fatal(err)
	}
	if err := host.AttachHTTP(d, h, host.HTTPConfig{State: cs}); err != nil {
		t.Fatal(err)
	}
	agentdtest.Start(t, d)
	agentdtest.WaitStatus(t, "http://"+d.HTTPAddr()+"/readyz", 200)
	nc, err := nats.Connect(d.NATSURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return d, h, nc
}

// must sends a command that must succeed and decodes its reply into out.
func must(t *testing.T, nc *nats.Conn, agent, verb, data string, out any) {
	t.Helper()
	body, code := request(t, nc, agent, verb, []byte(data))
	if code != "" {
		t.Fatalf("%s %s: %s %s", agent, verb, code, body)
	}
	if out != nil {
		if err := json.Unmarshal(body, out); err != nil {
			t.Fatalf("%s %s reply %s: %v", agent, verb, body, err)
		}
	}
}

// listNATS follows forever.list's pages and returns the agents.
func listNATS(t *testing.T, nc *nats.Conn, q agents.Query) []agents.Entry {
	t.Helper()
	var out []agents.Entry
	for {
		data, _ := json.Marshal(q)
		msg, err := nc.Request("forever.list", data, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if code := msg.Header.Get("Nats-Service-Error-Code"); code != "" {
			t.Fatalf("list %+v: %s %s", q, code, msg.Data)
		}
		var p agents.Page
		if err := json.Unmarshal(msg.Data, &p); err != nil {
			t.Fatal(err)
		}
		out = append(out, p.Agents...)
		if p.Next == "" {
			return out
		}
		q.Cursor = p.Next
	}
}

// listHTTP follows GET /v1/agents's pages.
func listHTTP(t *testing.T, base, query string) []agents.Entry {
	t.Helper()
	var out []agents.Entry
	cursor := ""
	for {
		code, body := agentdtest.Get(t, base+"/v1/agents?"+query+"&cursor="+cursor)
		if code != 200 {
			t.Fatalf("GET /v1/agents?%s: %d %s", query, code, body)
		}
		var p agents.Page
		if err := json.Unmarshal([]byte(body), &p); err != nil {
			t.Fatal(err)
		}
		out = append(out, p.Agents...)
		if p.Next == "" {
			return out
		}
		cursor = p.Next
	}
}

func ids(es []agents.Entry) []string {
	var out []string
	for _, e := range es {
		out = append(out, e.Agent)
	}
	return out
}

// TestListAndMeta: agents get their user context on their first command
// (any verb's payload "meta") or with the meta verb (read, replace,
// merge); forever.list and GET /v1/agents page through them by user, tag
// and type, in one shape; bad input is 400 with {"code","error"}.
func TestListAndMeta(t *testing.T) {
	d, _, nc := startAgentsHost(t, agentdtest.Config(t))
	base := "http://" + d.HTTPAddr()
	var wantSteps, wantU1, wantT0 []string
	for i := range 12 {
		user, tag := fmt.Sprintf("u%d", i%3), fmt.Sprintf("t%d", i%2)
		id := fmt.Sprintf("steps:s%02d", i)
		must(t, nc, id, "start", fmt.Sprintf(`{"steps":1,"delayMs":0,"meta":{"user":%q,"tags":[%q],"metadata":{"i":%d}}}`, user, tag, i), nil)
		wantSteps = append(wantSteps, id)
		if user == "u1" {
			wantU1 = append(wantU1, id)
		}
		if tag == "t0" {
			wantT0 = append(wantT0, id)
		}
	}
	for i := range 9 {
		id := fmt.Sprintf("c%02d", i)
		must(t, nc, id, "meta", fmt.Sprintf(`{"user":"u1","tags":["t%d"]}`, i%2), nil)
		wantU1 = append(wantU1, id)
		if i%2 == 0 {
			wantT0 = append(wantT0, id)
		}
	}
	slices.Sort(wantU1)
	slices.Sort(wantT0)

	// A command refused writes no meta.
	if body, code := request(t, nc, "steps:refused", "start", []byte(`{"steps":-1,"meta":{"user":"u9"}}`)); code != "400" {
		t.Fatalf("bad start: %s %s", code, body)
	}
	if body, code := request(t, nc, "steps:refused", "meta", nil); code != "404" {
		t.Fatalf("the refused command's meta was stored: %s %s", code, body)
	}

	// The meta of a later command does not change it.
	must(t, nc, "steps:s00", "start", `{"steps":1,"delayMs":0,"meta":{"user":"mallory"}}`, nil)
	var e agents.Entry
	must(t, nc, "steps:s00", "meta", ``, &e)
	if e.User != "u0" || !slices.Equal(e.Tags, []string{"t0"}) || string(e.Metadata) != `{"i":0}` || e.Type != "steps" || e.CreatedAt.IsZero() {
		t.Fatalf("steps:s00's entry: %+v", e)
	}
	must(t, nc, "steps:s00", "meta", `{"tags":["x"],"metadata":{"j":2},"merge":true}`, &e)
	if !slices.Equal(e.Tags, []string{"t0", "x"}) || string(e.Metadata) != `{"i":0,"j":2}` {
		t.Fatalf("merged: %+v", e)
	}
	must(t, nc, "steps:s00", "meta", `{"tags":["t0"],"metadata":{"i":0}}`, &e)
	if !slices.Equal(e.Tags, []string{"t0"}) || string(e.Metadata) != `{"i":0}` {
		t.Fatalf("replaced: %+v", e)
	}

	for _, tc := range []struct {
		name  string
		q     agents.Query
		query string
		want  []string
	}{
		{"type", agents.Query{Type: "steps", Limit: 5}, "type=steps&limit=5", wantSteps},
		{"user", agents.Query{User: "u1", Limit: 4}, "user=u1&limit=4", wantU1},
		{"tag", agents.Query{Tag: "t0", Limit: 3}, "tag=t0&limit=3", wantT0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ids(listNATS(t, nc, tc.q)); !slices.Equal(got, tc.want) {
				t.Fatalf("forever.list: %v, want %v", got, tc.want)
			}
			if got := ids(listHTTP(t, base, tc.query)); !slices.Equal(got, tc.want) {
				t.Fatalf("GET /v1/agents: %v, want %v", got, tc.want)
			}
		})
	}

	// Errors, in one shape on both transports.
	for _, tc := range []struct{ agent, verb, data, code, contains string }{
		{"steps:s01", "meta", `{"user":"a\nb"}`, "400", "control character"},
		{"steps:s01", "meta", `{"tags":"x"}`, "400", `"tags" must be`},
		{"steps:s01", "start", `{"steps":1,"meta":{"tags":[""]}}`, "400", "tag is empty"},
		{"nobody-yet", "meta", ``, "404", "has no event"},
	} {
		body, code := request(t, nc, tc.agent, tc.verb, []byte(tc.data))
		var shape struct {
			Code  int    `json:"code"`
			Error string `json:"error"`
		}
		if code != tc.code || json.Unmarshal(body, &shape) != nil || fmt.Sprint(shape.Code) != tc.code || !strings.Contains(shape.Error, tc.contains) {
			t.Errorf("%s %s %s: %s %s, want %s containing %q", tc.agent, tc.verb, tc.data, code, body, tc.code, tc.contains)
		}
	}
	msg, err := nc.Request("forever.list", []byte(`{"cursor":"!"}`), 5*time.Second)
	if err != nil || msg.Header.Get("Nats-Service-Error-Code") != "400" {
		t.Fatalf("bad cursor over NATS: %v %s", err, msg.Data)
	}
	for _, q := range []string{"cursor=!", "limit=x", "limit=5000"} {
		code, body := agentdtest.Get(t, base+"/v1/agents?"+q)
		if code != 400 || !strings.Contains(body, `"code":400`) {
			t.Errorf("GET /v1/agents?%s: %d %s", q, code, body)
		}
	}
}

// sseReader reads an SSE response's data lines into a channel.
func sseReader(t *testing.T, url string) (<-chan string, func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		cancel()
		t.Fatalf("GET %s: %d %s", url, resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	ch := make(chan string, 100)
	go func() {
		defer close(ch)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				ch <- data
			}
		}
	}()
	t.Cleanup(cancel)
	return ch, cancel
}

func next(t *testing.T, ch <-chan string) string {
	t.Helper()
	select {
	case s, ok := <-ch:
		if !ok {
			t.Fatal("the stream ended")
		}
		return s
	case <-time.After(10 * time.Second):
		t.Fatal("no message in 10s")
	}
	return ""
}

// TestBroadcastAndState: state changes and broadcasts reach the bcast
// subject and the SSE events endpoint in the order the agent published
// them; a client that connects late gets the current state first.
func TestBroadcastAndState(t *testing.T) {
	d, _, nc := startAgentsHost(t, agentdtest.Config(t))
	events := "http://" + d.HTTPAddr() + "/v1/agents/x1/events"
	sub, err := nc.SubscribeSync("forever.bcast.x1")
	if err != nil {
		t.Fatal(err)
	}
	early, _ := sseReader(t, events)
	if got, want := next(t, early), `{"type":"state","version":0,"value":null}`; got != want {
		t.Fatalf("first message %s, want %s", got, want)
	}
	steps := []struct{ verb, data, want string }{
		{"state", `{"a":1}`, `{"type":"state","version":1,"value":{"a":1}}`},
		{"cast", `"b1"`, `{"type":"broadcast","data":"b1"}`},
		{"cast", `{"p":[1,2]}`, `{"type":"broadcast","data":{"p":[1,2]}}`},
		{"state", `{"a":2}`, `{"type":"state","version":2,"value":{"a":2}}`},
		{"cast", `3`, `{"type":"broadcast","data":3}`},
	}
	for _, s := range steps {
		must(t, nc, "x1", s.verb, s.data, nil)
	}
	for _, s := range steps {
		m, err := sub.NextMsg(10 * time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if string(m.Data) != s.want {
			t.Fatalf("bcast subject: %s, want %s", m.Data, s.want)
		}
		if got := next(t, early); got != s.want {
			t.Fatalf("SSE: %s, want %s", got, s.want)
		}
	}
	late, _ := sseReader(t, events)
	if got, want := next(t, late), `{"type":"state","version":2,"value":{"a":2}}`; got != want {
		t.Fatalf("late client's first message %s, want %s", got, want)
	}
	must(t, nc, "x1", "cast", `"b4"`, nil)
	must(t, nc, "x1", "state", `{"a":3}`, nil)
	for _, want := range []string{`{"type":"broadcast","data":"b4"}`, `{"type":"state","version":3,"value":{"a":3}}`} {
		if got := next(t, late); got != want {
			t.Fatalf("late client: %s, want %s", got, want)
		}
	}
	if code, body := agentdtest.Get(t, "http://"+d.HTTPAddr()+"/v1/agents/a.b/events"); code != 400 || !strings.Contains(body, `"code":400`) {
		t.Fatalf("bad id: %d %s", code, body)
	}
}

// TestDeleteAgent: deleting an agent with a fiber running stops it,
// leaves only its tombstone in the log, takes it out of the listing and
// every view, keeps verify clean, and lets the id start again from
// nothing; a second delete is answered again; deleting nothing is 404.
func TestDeleteAgent(t *testing.T) {
	cfg := agentdtest.Config(t)
	d, _, nc := startAgentsHost(t, cfg)
	must(t, nc, "steps:d", "start", `{"steps":1000,"delayMs":20,"meta":{"user":"ann","tags":["doomed"]}}`, nil)
	must(t, nc, "steps:keep", "start", `{"steps":1,"delayMs":0,"meta":{"user":"ann"}}`, nil)
	var e agents.Entry
	must(t, nc, "steps:d", "meta", ``, &e)
	if e.Status != agents.StatusRunning {
		t.Fatalf("before delete: %+v", e)
	}
	var rep host.DeleteReply
	must(t, nc, "steps:d", "delete", ``, &rep)
	if !rep.Deleted || rep.Again || rep.Agent != "steps:d" {
		t.Fatalf("delete reply %+v", rep)
	}
	lg, err := eventlog.Open(t.Context(), eventlog.Config{Conn: nc, Bind: true})
	if err != nil {
		t.Fatal(err)
	}
	// Not a synchronisation: time for a write the stopped fiber should not
	// make to show up, so that the read below can prove it never came.
	time.Sleep(200 * time.Millisecond)
	evs, err := lg.Read(t.Context(), eventlog.Filter{Agent: "steps:d"}, 0, 0)
	if err != nil || len(evs) != 1 || evs[0].Type != eventlog.TypeDeleted || evs[0].Seq != rep.Tombstone {
		t.Fatalf("events of steps:d after delete: %v %v", evs, err)
	}
	var fibers []host.FiberInfo
	must(t, nc, "steps:d", "fibers", ``, &fibers)
	if len(fibers) != 0 {
		t.Fatalf("fibers after delete: %+v", fibers)
	}
	if body, code := request(t, nc, "steps:d", "meta", nil); code != "404" {
		t.Fatalf("meta after delete: %s %s", code, body)
	}
	if got := ids(listNATS(t, nc, agents.Query{User: "ann"})); !slices.Equal(got, []string{"steps:keep"}) {
		t.Fatalf("ann's agents after delete: %v", got)
	}
	if got := ids(listNATS(t, nc, agents.Query{Tag: "doomed"})); len(got) != 0 {
		t.Fatalf("tag doomed after delete: %v", got)
	}
	must(t, nc, "steps:d", "delete", ``, &rep)
	if !rep.Again {
		t.Fatalf("second delete %+v", rep)
	}
	if body, code := request(t, nc, "steps:never", "delete", nil); code != "404" {
		t.Fatalf("delete of nothing: %s %s", code, body)
	}
	r, err := verify.Check(t.Context(), lg, verify.Options{})
	if err != nil || !r.OK() {
		t.Fatalf("verify after delete: %v\n%s", err, r)
	}

	// The id again: a new agent, from nothing.
	must(t, nc, "steps:d", "start", `{"steps":1,"delayMs":0}`, nil)
	must(t, nc, "steps:d", "meta", ``, &e)
	if e.User != "" || len(e.Tags) != 0 || !e.CreatedAt.After(evs[0].Time) {
		t.Fatalf("the id reused carries the old agent's context: %+v", e)
	}
	_ = d
}
