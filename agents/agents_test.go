package agents_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/forever-agents/forever/agents"
	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/eventlog/eventlogtest"
	"github.com/nats-io/nats-server/v2/server"
)

var types = agents.Types{Registered: []string{"chat", "steps"}, Default: "chat"}

// openView opens a log on s with a fresh Pebble and the agents view
// running, and returns the log and the view.
func openView(t *testing.T, s *server.Server) (*eventlog.Log, *eventlog.Follower, *agents.View) {
	t.Helper()
	lg := eventlogtest.OpenOn(t, s, eventlog.Config{})
	f, err := lg.NewFollower()
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Add(agents.Projection()); err != nil {
		t.Fatal(err)
	}
	eventlogtest.RunFollower(t, f)
	v, err := lg.View(agents.ProjectionName)
	if err != nil {
		t.Fatal(err)
	}
	return lg, f, agents.NewView(v)
}

func caughtUp(t *testing.T, lg *eventlog.Log, f *eventlog.Follower) {
	t.Helper()
	last, err := lg.LastSeq(t.Context(), eventlog.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.WaitFor(t.Context(), last); err != nil {
		t.Fatal(err)
	}
}

func metaEvent(t testing.TB, agent string, p agents.MetaPatch) eventlog.Event {
	t.Helper()
	e, err := eventlog.NewEvent(agent, agents.EventMeta, p)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func ptr[T any](v T) *T { return &v }

// fleet is n agents: ids of three types, users u0..u6, tags by residue.
type fleetAgent struct {
	id, typ, user string
	tags          []string
}

func fleet(n int) []fleetAgent {
	out := make([]fleetAgent, n)
	for i := range out {
		a := fleetAgent{user: fmt.Sprintf("u%d", i%7)}
		switch i % 3 {
		case 0:
			a.id, a.typ = fmt.Sprintf("steps:a%05d", i), "steps"
		case 1:
			a.id, a.typ = fmt.Sprintf("a%05d", i), "chat"
		default:
			a.id, a.typ = fmt.Sprintf("chat:a%05d", i), "chat"
		}
		if i%5 == 0 {
			a.tags = append(a.tags, "t5")
		}
		if i%2 == 0 {
			a.tags = append(a.tags, "even")
		}
		out[i] = a
	}
	return out
}

// writeFleet appends one meta event per agent, in batches.
func writeFleet(t testing.TB, lg *eventlog.Log, fl []fleetAgent) {
	t.Helper()
	var evs []eventlog.Event
	for _, a := range fl {
		evs = append(evs, metaEvent(t, a.id, agents.MetaPatch{User: ptr(a.user), Tags: ptr(a.tags), Metadata: json.RawMessage(`{"n":1}`)}))
		if len(evs) == 1000 {
			if _, err := lg.AppendBatch(t.Context(), evs); err != nil {
				t.Fatal(err)
			}
			evs = evs[:0]
		}
	}
	if len(evs) > 0 {
		if _, err := lg.AppendBatch(t.Context(), evs); err != nil {
			t.Fatal(err)
		}
	}
}

// listAll follows a listing's pages and returns the agent ids in order.
func listAll(t *testing.T, v *agents.View, q agents.Query) []string {
	t.Helper()
	var ids []string
	for pages := 0; ; pages++ {
		if pages > 20000 {
			t.Fatal("the listing never ends")
		}
		p, err := v.List(q, types)
		if err != nil {
			t.Fatalf("list %+v: %v", q, err)
		}
		if len(p.Agents) > max(q.Limit, 0) && q.Limit > 0 {
			t.Fatalf("page of %d agents over limit %d", len(p.Agents), q.Limit)
		}
		for _, e := range p.Agents {
			ids = append(ids, e.Agent)
		}
		if p.Next == "" {
			return ids
		}
		if len(p.Agents) == 0 {
			t.Fatalf("an empty page with a next cursor")
		}
		q.Cursor = p.Next
	}
}

// TestListPages: over 10k agents, every filter (user, tag, type, the
// default type, and combined) pages through exactly the agents it selects,
// in id order, each once, and no page ends in an empty one.
func TestListPages(t *testing.T) {
	s := eventlogtest.RunServer(t, eventlogtest.ServerOptions{})
	lg, f, v := openView(t, s)
	fl := fleet(10_000)
	writeFleet(t, lg, fl)
	caughtUp(t, lg, f)
	for _, tc := range []struct {
		name string
		q    agents.Query
		keep func(fleetAgent) bool
	}{
		{"all", agents.Query{Limit: 1000}, func(fleetAgent) bool { return true }},
		{"user", agents.Query{User: "u3", Limit: 97}, func(a fleetAgent) bool { return a.user == "u3" }},
		{"tag", agents.Query{Tag: "t5", Limit: 50}, func(a fleetAgent) bool { return slices.Contains(a.tags, "t5") }},
		{"type", agents.Query{Type: "steps", Limit: 333}, func(a fleetAgent) bool { return a.typ == "steps" }},
		{"default type", agents.Query{Type: "chat", Limit: 500}, func(a fleetAgent) bool { return a.typ == "chat" }},
		{"user, tag and type", agents.Query{User: "u1", Tag: "even", Type: "chat", Limit: 10}, func(a fleetAgent) bool {
			return a.user == "u1" && slices.Contains(a.tags, "even") && a.typ == "chat"
		}},
		{"nobody", agents.Query{User: "u9"}, func(fleetAgent) bool { return false }},
		{"no such type", agents.Query{Type: "none"}, func(fleetAgent) bool { return false }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var want []string
			for _, a := range fl {
				if tc.keep(a) {
					want = append(want, a.id)
				}
			}
			slices.Sort(want)
			got := listAll(t, v, tc.q)
			if !slices.Equal(got, want) {
				t.Fatalf("got %d agents, want %d (first got %v, want %v)", len(got), len(want), head(got), head(want))
			}
		})
	}
	p, err := v.List(agents.Query{Type: "steps", Limit: 1}, types)
	if err != nil || len(p.Agents) != 1 {
		t.Fatal(p, err)
	}
	e := p.Agents[0]
	if e.Agent != "steps:a00000" || e.Type != "steps" || e.User != "u0" || !slices.Equal(e.Tags, []string{"even", "t5"}) ||
		string(e.Metadata) != `{"n":1}` || e.Status != agents.StatusIdle || e.CreatedAt.IsZero() || e.Children == nil {
		t.Fatalf("entry %+v", e)
	}
	for _, bad := range []agents.Query{{Cursor: "!!"}, {Cursor: agents.EncodeCursor("a.b")}, {Limit: agents.MaxLimit + 1}, {Limit: -1}} {
		if _, err := v.List(bad, types); err == nil {
			t.Errorf("list %+v: no error", bad)
		}
	}
}

func head(ids []string) []string { return ids[:min(len(ids), 3)] }

// TestListDuringChanges: agents added and deleted between pages are seen
// or not, but an agent present throughout is listed exactly once.
func TestListDuringChanges(t *testing.T) {
	s := eventlogtest.RunServer(t, eventlogtest.ServerOptions{})
	lg, f, v := openView(t, s)
	fl := fleet(300)
	writeFleet(t, lg, fl)
	caughtUp(t, lg, f)
	q := agents.Query{Limit: 40}
	seen := map[string]int{}
	for i := 0; ; i++ {
		p, err := v.List(q, types)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range p.Agents {
			seen[e.Agent]++
		}
		// Between pages: a new agent before and after the cursor, and a
		// deletion ahead.
		writeFleet(t, lg, []fleetAgent{{id: fmt.Sprintf("a%05d-new%d", i*37%300, i), user: "u0"}})
		if _, err := lg.Delete(t.Context(), fl[(i*53+150)%300].id); err != nil {
			t.Fatal(err)
		}
		caughtUp(t, lg, f)
		if p.Next == "" {
			break
		}
		q.Cursor = p.Next
	}
	deleted := map[string]bool{}
	for i := range 20 {
		deleted[fl[(i*53+150)%300].id] = true
	}
	for _, a := range fl {
		if n := seen[a.id]; n > 1 || n == 0 && !deleted[a.id] {
			t.Fatalf("agent %s listed %d times", a.id, n)
		}
	}
}

// TestViewRebuildsTheSame: the view rebuilt from the log (after a
// compaction of some agents, and a deletion) holds the same rows; the
// deleted agent has none, not even an index row.
func TestViewRebuildsTheSame(t *testing.T) {
	s := eventlogtest.RunServer(t, eventlogtest.ServerOptions{})
	lg, f, v := openView(t, s)
	fl := fleet(30)
	writeFleet(t, lg, fl)
	ctx := t.Context()
	for _, a := range fl[:10] {
		for _, e := range []eventlog.Event{
			{Agent: a.id, Type: "fiber.started", Data: json.RawMessage(`{"id":"f-` + a.id + `"}`)},
			metaEvent(t, a.id, agents.MetaPatch{Tags: ptr([]string{"more"}), Merge: true}),
		} {
			if _, err := lg.Append(ctx, e); err != nil {
				t.Fatal(err)
			}
		}
	}
	caughtUp(t, lg, f)
	for _, a := range fl[:5] {
		if _, err := lg.Compact(ctx, a.id); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := lg.Delete(ctx, fl[1].id); err != nil {
		t.Fatal(err)
	}
	caughtUp(t, lg, f)
	live := rows(t, lg)
	for k := range live {
		if strings.HasSuffix(k, fl[1].id) {
			t.Fatalf("the deleted agent keeps row %q", k)
		}
	}
	if _, ok, _ := v.Get(fl[1].id, types); ok {
		t.Fatal("the deleted agent is still in the view")
	}
	lg2, f2, v2 := openView(t, s)
	caughtUp(t, lg2, f2)
	if rebuilt := rows(t, lg2); !maps(live, rebuilt) {
		t.Fatalf("rebuilt rows differ:\n%v\n%v", live, rebuilt)
	}
	e, ok, err := v2.Get(fl[0].id, types)
	if err != nil || !ok || e.Status != agents.StatusRunning || !slices.Contains(e.Tags, "more") || !slices.Contains(e.Tags, "t5") {
		t.Fatalf("compacted agent after rebuild: %+v %v %v", e, ok, err)
	}
}

func rows(t *testing.T, lg *eventlog.Log) map[string]string {
	t.Helper()
	v, err := lg.View(agents.ProjectionName)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for kv, err := range v.Scan(nil) {
		if err != nil {
			t.Fatal(err)
		}
		out[string(kv.Key)] = string(kv.Value)
	}
	return out
}

func maps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestStatus: the status follows fiber and turn events.
func TestStatus(t *testing.T) {
	ev := func(typ, data string) eventlog.Event {
		return eventlog.Event{Agent: "x", Type: typ, Data: json.RawMessage(data), Time: time.Unix(0, 0)}
	}
	completes := func(e eventlog.Event, fiber string) eventlog.Event { e.Completes = fiber; return e }
	for _, tc := range []struct {
		name   string
		events []eventlog.Event
		want   string
	}{
		{"new", []eventlog.Event{ev("note", `{}`)}, agents.StatusIdle},
		{"fiber runs", []eventlog.Event{ev("fiber.started", `{"id":"f1"}`)}, agents.StatusRunning},
		{"two fibers, one ended", []eventlog.Event{ev("fiber.started", `{"id":"f1"}`), ev("fiber.started", `{"id":"f2"}`), ev("fiber.completed", `{"id":"f1"}`)}, agents.StatusRunning},
		{"fiber done", []eventlog.Event{ev("fiber.started", `{"id":"f1"}`), ev("fiber.completed", `{"id":"f1"}`)}, agents.StatusIdle},
		{"fiber abandoned", []eventlog.Event{ev("fiber.started", `{"id":"f1"}`), ev("fiber.abandoned", `{"id":"f1"}`)}, agents.StatusFailed},
		{"turn waits", []eventlog.Event{ev("fiber.started", `{"id":"f1"}`), ev("turn.started", `{}`), ev("turn.completed", `{"finishReason":"tool_calls"}`), ev("fiber.completed", `{"id":"f1"}`)}, agents.StatusWaiting},
		{"answered", []eventlog.Event{ev("turn.completed", `{"finishReason":"tool_calls"}`), ev("turn.started", `{}`), ev("turn.completed", `{"finishReason":"stop"}`)}, agents.StatusIdle},
		{"turn failed", []eventlog.Event{ev("turn.started", `{}`), ev("turn.failed", `{"error":"x"}`)}, agents.StatusFailed},
		{"failed, then a new turn", []eventlog.Event{ev("turn.failed", `{}`), ev("fiber.started", `{"id":"f2"}`), ev("turn.started", `{}`), ev("turn.completed", `{"finishReason":"stop"}`), ev("fiber.completed", `{"id":"f2"}`)}, agents.StatusIdle},
		{"bad data", []eventlog.Event{ev("fiber.started", `[`), ev("agent.meta", `{"user":7}`)}, agents.StatusIdle},
		// Record format 11: the turn's outcome carries its fiber's end.
		{"fiber ended in turn.completed", []eventlog.Event{ev("fiber.started", `{"id":"f1"}`), ev("turn.started", `{}`), completes(ev("turn.completed", `{"finishReason":"stop"}`), "f1")}, agents.StatusIdle},
		{"turn waits, fiber ended in it", []eventlog.Event{ev("fiber.started", `{"id":"f1"}`), ev("turn.started", `{}`), completes(ev("turn.completed", `{"finishReason":"tool_calls"}`), "f1")}, agents.StatusWaiting},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kvs, err := eventlog.ApplyInMemory(agents.Projection(), tc.events)
			if err != nil {
				t.Fatal(err)
			}
			var r struct {
				Running []string
				Waiting bool
				Failed  bool
			}
			for _, kv := range kvs {
				if string(kv.Key) == "a/x" {
					_ = json.Unmarshal(kv.Value, &r)
				}
			}
			got := agents.StatusIdle
			switch {
			case len(r.Running) > 0:
				got = agents.StatusRunning
			case r.Waiting:
				got = agents.StatusWaiting
			case r.Failed:
				got = agents.StatusFailed
			}
			if got != tc.want {
				t.Fatalf("status %s, want %s (row %+v)", got, tc.want, r)
			}
		})
	}
}

// TestMetaPatch: replace and merge of user, tags and metadata, the
// Initial rule, and the limits.
func TestMetaPatch(t *testing.T) {
	meta := func(t *testing.T, ps ...agents.MetaPatch) agents.Entry {
		t.Helper()
		var evs []eventlog.Event
		for _, p := range ps {
			e := metaEvent(t, "x", p)
			e.Time = time.Unix(1, 0)
			evs = append(evs, e)
		}
		kvs, err := eventlog.ApplyInMemory(agents.Projection(), evs)
		if err != nil {
			t.Fatal(err)
		}
		var got agents.Entry
		var keys []string
		for _, kv := range kvs {
			keys = append(keys, string(kv.Key))
			if string(kv.Key) == "a/x" {
				if err := json.Unmarshal(kv.Value, &got); err != nil {
					t.Fatal(err)
				}
			}
		}
		for _, tag := range got.Tags {
			if !slices.Contains(keys, "t/"+tag+"\x00x") {
				t.Fatalf("tag %s not indexed: %q", tag, keys)
			}
		}
		if got.User != "" && !slices.Contains(keys, "u/"+got.User+"\x00x") {
			t.Fatalf("user not indexed: %q", keys)
		}
		if n := len(keys); n != 1+len(got.Tags)+min(len(got.User), 1) {
			t.Fatalf("keys %q: stale index rows", keys)
		}
		return got
	}
	e := meta(t,
		agents.MetaPatch{User: ptr("ann"), Tags: ptr([]string{"b", "a", "a"}), Metadata: json.RawMessage(`{"k":1,"z":2}`)},
		agents.MetaPatch{Tags: ptr([]string{"c"}), Metadata: json.RawMessage(`{"k":null,"m":"v"}`), Merge: true},
	)
	if e.User != "ann" || !slices.Equal(e.Tags, []string{"a", "b", "c"}) || string(e.Metadata) != `{"m":"v","z":2}` {
		t.Fatalf("merged: %+v %s", e, e.Metadata)
	}
	e = meta(t,
		agents.MetaPatch{User: ptr("ann"), Tags: ptr([]string{"a"})},
		agents.MetaPatch{User: ptr("bob"), Tags: ptr([]string{}), Metadata: json.RawMessage(`null`)},
	)
	if e.User != "bob" || len(e.Tags) != 0 || len(e.Metadata) != 0 {
		t.Fatalf("replaced: %+v", e)
	}
	e = meta(t,
		agents.MetaPatch{User: ptr("ann"), Initial: true},
		agents.MetaPatch{User: ptr("bob"), Initial: true},
	)
	if e.User != "ann" {
		t.Fatalf("a second initial patch applied: %+v", e)
	}
	for _, bad := range []agents.MetaPatch{
		{User: ptr(strings.Repeat("u", agents.MaxUserBytes+1))},
		{User: ptr("a\nb")},
		{Tags: ptr([]string{""})},
		{Tags: ptr(make([]string, agents.MaxTags+1))},
		{Metadata: json.RawMessage(`[1]`)},
		{Metadata: json.RawMessage(`{"x":"` + strings.Repeat("y", agents.MaxMetadataBytes) + `"}`)},
	} {
		if err := bad.Validate(); err == nil {
			t.Errorf("%+v validated", bad)
		}
	}
}

// TestChildren: sub-agent link events list the parent's children, one per
// child agent, the last called at the end, with their type, mode and
// status; a parent keeps at most MaxChildren, dropping the oldest that
// does not run.
func TestChildren(t *testing.T) {
	s := eventlogtest.RunServer(t, eventlogtest.ServerOptions{})
	lg, f, v := openView(t, s)
	link := func(parent, typ, child, mode, status string) {
		t.Helper()
		data := fmt.Sprintf(`{"agent":%q,"mode":%q,"callId":"c","requestId":"r","status":%q,"output":{"text":"long"}}`, child, mode, status)
		if status == "" {
			data = `{"agent":5}` // does not decode: ignored
		}
		if _, err := lg.Append(t.Context(), eventlog.Event{Agent: parent, Type: typ, Data: json.RawMessage(data)}); err != nil {
			t.Fatal(err)
		}
	}
	link("boss", "subagent.started", "kid-a", "persistent", "running")
	link("boss", "subagent.started", "steps:k", "ephemeral", "running")
	link("boss", "subagent.ended", "kid-a", "persistent", "completed")
	link("boss", "subagent.ended", "steps:k", "ephemeral", "cancelled")
	link("boss", "subagent.started", "kid-a", "persistent", "running")
	link("boss", "subagent.ended", "kid-a", "", "")
	caughtUp(t, lg, f)
	e, ok, err := v.Get("boss", types)
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	want := []agents.Child{
		{Agent: "steps:k", Type: "steps", Mode: "ephemeral", Status: "cancelled"},
		{Agent: "kid-a", Type: "chat", Mode: "persistent", Status: "running"},
	}
	if !slices.Equal(e.Children, want) {
		t.Fatalf("children %+v, want %+v", e.Children, want)
	}
	p, err := v.List(agents.Query{}, types)
	if err != nil || len(p.Agents) != 1 || !slices.Equal(p.Agents[0].Children, want) {
		t.Fatalf("listed %+v %v", p, err)
	}

	// The bound: kid-a runs, the ended ones go first.
	for i := range agents.MaxChildren + 5 {
		link("boss", "subagent.ended", fmt.Sprintf("eph%03d", i), "ephemeral", "completed")
	}
	caughtUp(t, lg, f)
	e, _, _ = v.Get("boss", types)
	if len(e.Children) != agents.MaxChildren || e.Children[0].Agent != "kid-a" || e.Children[len(e.Children)-1].Agent != fmt.Sprintf("eph%03d", agents.MaxChildren+4) {
		t.Fatalf("%d children, first %+v, last %+v", len(e.Children), e.Children[0], e.Children[len(e.Children)-1])
	}
}
