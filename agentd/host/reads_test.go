package host_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/forever-agents/forever/agentd"
	"github.com/forever-agents/forever/agentd/agentdtest"
	"github.com/forever-agents/forever/agentd/host"
	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/fiber"
	"github.com/forever-agents/forever/internal/waitfor"
	"github.com/forever-agents/forever/keepalive"
)

// getJSON GETs url and decodes a 200's body into out; it returns the code
// and body.
func getJSON(t *testing.T, url string, out any) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode == 200 && out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("GET %s: %s: %v", url, b, err)
		}
	}
	return resp.StatusCode, string(b)
}

// TestLogPages: the log verb pages an agent's events in order, none
// skipped nor repeated, over NATS and HTTP alike; a type filter keeps only
// the types asked for; a bad cursor or limit is a 400 naming it.
func TestLogPages(t *testing.T) {
	d, _, nc := startAgentsHost(t, agentdtest.Config(t))
	base := "http://" + d.HTTPAddr() + "/v1/agents/steps:log"
	must(t, nc, "steps:log", "start", `{"steps":4,"delayMs":0}`, nil)
	var all host.LogPage
	waitfor.NoError(t, func() error {
		must(t, nc, "steps:log", "log", `{"limit":1000}`, &all)
		if n := len(all.Events); n > 0 && all.Events[n-1].Type == fiber.EventCompleted {
			return nil
		}
		return fmt.Errorf("a fiber.completed in %+v", all.Events)
	})
	if all.More || all.Next != all.Events[len(all.Events)-1].Seq {
		t.Fatalf("whole log: more %v, next %q, last %q", all.More, all.Next, all.Events[len(all.Events)-1].Seq)
	}
	for _, via := range []string{"NATS", "HTTP"} {
		var got []host.LogEvent
		after := ""
		for page := 0; ; page++ {
			var p host.LogPage
			if via == "NATS" {
				must(t, nc, "steps:log", "log", `{"limit":3,"after":"`+after+`"}`, &p)
			} else if code, body := getJSON(t, base+"/log?limit=3&after="+after, &p); code != 200 {
				t.Fatalf("GET log: %d %s", code, body)
			}
			if len(p.Events) > 3 {
				t.Fatalf("%s: page of %d events, limit 3", via, len(p.Events))
			}
			got = append(got, p.Events...)
			after = p.Next
			if !p.More {
				break
			}
		}
		if len(got) != len(all.Events) {
			t.Fatalf("%s: %d events paged, %d in the log", via, len(got), len(all.Events))
		}
		prev := uint64(0)
		for i, e := range got {
			seq, _ := strconv.ParseUint(e.Seq, 10, 64)
			if e.ID != all.Events[i].ID || seq <= prev || e.Writer == nil || e.Time.IsZero() {
				t.Fatalf("%s: event %d = %+v, want %+v after %d", via, i, e, all.Events[i], prev)
			}
			prev = seq
		}
	}
	var fibers host.LogPage
	if code, body := getJSON(t, base+"/log?type=fiber.,op.", &fibers); code != 200 {
		t.Fatalf("GET log by type: %d %s", code, body)
	}
	for _, e := range fibers.Events {
		if !strings.HasPrefix(e.Type, "fiber.") && !strings.HasPrefix(e.Type, "op.") {
			t.Errorf("type filter let %s through", e.Type)
		}
	}
	if len(fibers.Events) == 0 || len(fibers.Events) == len(all.Events) {
		t.Errorf("type filter kept %d of %d events", len(fibers.Events), len(all.Events))
	}
	for _, q := range []string{"after=x1", "limit=0", "limit=5000", "after=-1"} {
		code, body := getJSON(t, base+"/log?"+q, nil)
		if code != 400 || !strings.Contains(body, `"code":400`) || !strings.Contains(body, strings.Split(q, "=")[0]) {
			t.Errorf("GET log?%s: %d %s, want a 400 naming the parameter", q, code, body)
		}
	}
}

// TestFibersWithOps: the fibers verb lists a running fiber's steps when
// asked (?ops=true), and status carries the listing's entry.
func TestFibersWithOps(t *testing.T) {
	d, _, nc := startAgentsHost(t, agentdtest.Config(t))
	base := "http://" + d.HTTPAddr() + "/v1/agents/steps:ops"
	must(t, nc, "steps:ops", "start", `{"steps":50,"delayMs":100}`, nil)
	var fibers []host.FiberInfo
	waitfor.NoError(t, func() error {
		if code, body := getJSON(t, base+"/fibers?ops=true", &fibers); code != 200 {
			t.Fatalf("GET fibers: %d %s", code, body)
		}
		if len(fibers) == 1 && len(fibers[0].Ops) >= 2 {
			return nil
		}
		return fmt.Errorf("one fiber with 2 steps, have %+v", fibers)
	})
	// Ops come ordered by op id (random), not by step: look for a done one.
	if !slices.ContainsFunc(fibers[0].Ops, func(o host.OpInfo) bool { return o.Completed && o.Key != "" }) {
		t.Errorf("steps %+v, want one completed with its key", fibers[0].Ops)
	}
	var plain []host.FiberInfo
	must(t, nc, "steps:ops", "fibers", "", &plain)
	if len(plain) != 1 || plain[0].Ops != nil {
		t.Errorf("fibers without ops = %+v", plain)
	}
	var st host.Status
	if code, body := getJSON(t, base+"/status", &st); code != 200 || st.Entry == nil || st.Entry.Type != "steps" || st.Entry.Status != "running" {
		t.Errorf("status: %d %s, want the entry of a running steps agent", code, body)
	}
	if code, body := getJSON(t, "http://"+d.HTTPAddr()+"/v1/agents/a.b/status", nil); code != 400 || !strings.Contains(body, `"code":400`) {
		t.Errorf("status of a bad id: %d %s", code, body)
	}
}

// TestClusterSubject: forever.cluster answers agentd.ClusterInfo over NATS.
func TestClusterSubject(t *testing.T) {
	d, _, nc := startAgentsHost(t, agentdtest.Config(t))
	msg, err := nc.Request(host.ClusterSubject("forever"), nil, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var info agentd.ClusterInfo
	if err := json.Unmarshal(msg.Data, &info); err != nil || info.Node != d.Config().ServerName || len(info.Streams) != 3 {
		t.Fatalf("cluster reply %s (%v)", msg.Data, err)
	}
	if info.Streams[0].Name != eventlog.DefaultEventsStream {
		t.Errorf("streams %+v", info.Streams)
	}
}

// TestLogShowsCompaction: once an agent is compacted, its log starts with
// the snapshot, summarised: what it covers and each view's row count,
// not its rows.
func TestLogShowsCompaction(t *testing.T) {
	cfg := agentdtest.Config(t)
	cfg.CompactIdleEvents = 5
	_, _, nc, _ := startHost(t, cfg, host.Config{IdleTimeout: 100 * time.Millisecond}, make(chan keepalive.Schedule, 1))
	must(t, nc, "steps:cpt", "start", `{"steps":10,"delayMs":0}`, nil)
	var p host.LogPage
	waitfor.NoError(t, func() error {
		must(t, nc, "steps:cpt", "log", "", &p)
		if len(p.Events) == 1 && p.Events[0].Type == eventlog.TypeSnapshot {
			return nil
		}
		return fmt.Errorf("the agent to be compacted: %d events", len(p.Events))
	})
	var sum struct {
		Upto  string
		Parts int
		Views map[string]int
	}
	if err := json.Unmarshal(p.Events[0].Data, &sum); err != nil || sum.Upto == "" || sum.Parts != 1 || len(sum.Views) == 0 {
		t.Fatalf("snapshot shown as %s (%v)", p.Events[0].Data, err)
	}
	if _, ok := sum.Views[fiber.RunsName]; !ok {
		t.Errorf("snapshot summary %s does not name the runs view", p.Events[0].Data)
	}
}
