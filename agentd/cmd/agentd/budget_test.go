package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/forever-agents/forever/agentd/agentdtest"
	"github.com/forever-agents/forever/agentd/chathost"
	"github.com/forever-agents/forever/chat"
	"github.com/forever-agents/forever/internal/waitfor"
)

// testGatewayBudget runs on testBinaryGateway's agentd: an agent given the
// budget {"tokens":600,"period":"24h","soft":1} answers chats until its
// usage passes 600 tokens; the next chat gets 402 over NATS and over
// HTTP, naming the budget, its period and its reset; budget (read) shows
// the spend equal to usage's sum, and the CLI prints it.
func testGatewayBudget(t *testing.T, bin, httpAddr, natsAddr string) {
	const agent = "budget-a1"
	nc, err := nats.Connect("nats://" + natsAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	send := func(verb, payload string, out any) (code string, body string) {
		t.Helper()
		var data []byte
		if payload != "" {
			data = []byte(payload)
		}
		m, err := nc.Request("forever.cmd."+agent+"."+verb, data, 20*time.Second)
		if err != nil {
			t.Fatalf("%s: %v", verb, err)
		}
		if code := m.Header.Get("Nats-Service-Error-Code"); code != "" {
			return code, string(m.Data)
		}
		if out != nil {
			if err := json.Unmarshal(m.Data, out); err != nil {
				t.Fatalf("%s reply %s: %v", verb, m.Data, err)
			}
		}
		return "", string(m.Data)
	}

	var st chat.BudgetStatus
	if code, body := send("budget", `{"tokens":600,"period":"24h","soft":1}`, &st); code != "" {
		t.Fatalf("set budget: %s %s", code, body)
	}
	if st.Tokens != 600 || st.Period != "24h" || st.Soft != 1 || st.Exceeded != "" {
		t.Fatalf("budget after set = %+v", st)
	}

	// Chats until the usage passes 600 tokens; each is answered.
	var u chathost.UsageReply
	for i := 0; u.Input+u.Output < 600; i++ {
		if i == 40 {
			t.Fatalf("40 chats used only %d tokens", u.Input+u.Output)
		}
		if code, body := send("chat", `{"text":"hello, this is message number `+string(rune('a'+i%26))+`"}`, nil); code != "" {
			t.Fatalf("chat %d with %d tokens used: %s %s", i, u.Input+u.Output, code, body)
		}
		waitfor.NoError(t, func() error {
			if send("usage", "", &u); u.Turns != i+1 {
				return fmt.Errorf("turn %d to be recorded in usage: %+v", i, u)
			}
			return nil
		})
	}
	if u.Cost == 0 || u.Budget == nil || u.Budget.Exceeded != "tokens" {
		t.Fatalf("usage = %+v, want a cost and the budget exceeded", u)
	}

	// The next chat: 402 over NATS...
	code, body := send("chat", `{"text":"one more"}`, nil)
	if code != "402" || !strings.Contains(body, "token budget of 600 tokens per 24h") || !strings.Contains(body, "resets at") {
		t.Fatalf("chat past the budget over NATS: %s %s, want 402 naming the budget", code, body)
	}
	// ...and over HTTP.
	resp := agentdtest.Post(t, t.Context(), "http://"+httpAddr+"/v1/chat",
		`{"id":"`+agent+`","messages":[{"id":"u-over","role":"user","parts":[{"type":"text","text":"one more"}]}]}`)
	hb, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusPaymentRequired || resp.Header.Get("Retry-After") == "" || !strings.Contains(string(hb), `"code":402`) {
		t.Fatalf("chat past the budget over HTTP: %d %v %s", resp.StatusCode, resp.Header, hb)
	}

	// budget (read) shows the spend equal to usage's sum, over NATS and HTTP.
	send("usage", "", &u)
	st = chat.BudgetStatus{}
	if code, body := send("budget", "", &st); code != "" {
		t.Fatalf("read budget: %s %s", code, body)
	}
	if st.Spent.Tokens != u.Input+u.Output || st.Spent.Cost != u.Cost || st.Exceeded != "tokens" {
		t.Fatalf("budget spent %+v (%s), usage %d+%d tokens, %s", st.Spent, st.Exceeded, u.Input, u.Output, u.Cost)
	}
	hr, err := http.Get("http://" + httpAddr + "/v1/agents/" + agent + "/budget")
	if err != nil {
		t.Fatal(err)
	}
	var hst chat.BudgetStatus
	err = json.NewDecoder(hr.Body).Decode(&hst)
	hr.Body.Close()
	if err != nil || hr.StatusCode != 200 || hst.Spent != st.Spent {
		t.Fatalf("GET budget: %d %+v %v", hr.StatusCode, hst, err)
	}

	// PUT sets it over HTTP (a field left out keeps its value); a body
	// that sets nothing is 400.
	for _, tc := range []struct {
		body string
		code int
	}{{`{"soft":0.9}`, 200}, {`{}`, 400}, {`{"cost":"1.5.0"}`, 400}} {
		preq, _ := http.NewRequest(http.MethodPut, "http://"+httpAddr+"/v1/agents/"+agent+"/budget", strings.NewReader(tc.body))
		presp, err := http.DefaultClient.Do(preq)
		if err != nil {
			t.Fatal(err)
		}
		pb, _ := io.ReadAll(presp.Body)
		presp.Body.Close()
		if presp.StatusCode != tc.code {
			t.Fatalf("PUT budget %s: %d %s, want %d", tc.body, presp.StatusCode, pb, tc.code)
		}
		if tc.code == 200 && (!strings.Contains(string(pb), `"soft":0.9`) || !strings.Contains(string(pb), `"tokens":600`)) {
			t.Fatalf("PUT budget %s: %s", tc.body, pb)
		}
	}

	// The CLI prints it, and raising the limit lets chats in again.
	out, err := exec.Command(bin, "budget", agent, "--server", "nats://"+natsAddr).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "of 600") || !strings.Contains(string(out), "tokens limit is reached") {
		t.Fatalf("agentd budget: %v\n%s", err, out)
	}
	out, err = exec.Command(bin, "budget", agent, "--tokens", "0", "--cost", "1.50", "--server", "nats://"+natsAddr).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "of $1.50") || strings.Contains(string(out), "is reached") {
		t.Fatalf("agentd budget --tokens 0 --cost 1.50: %v\n%s", err, out)
	}
	if code, body := send("chat", `{"text":"again"}`, nil); code != "" {
		t.Fatalf("chat after raising the budget: %s %s", code, body)
	}

	testRunawayBudget(t, nc)
	testSoftBudget(t, nc, bin, natsAddr)

	mresp, err := http.Get("http://" + httpAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(mresp.Body)
	mresp.Body.Close()
	for _, want := range []string{`forever_budget_refusals_total{at="turn",scope="agent"} 2`, `forever_budget_refusals_total{at="model_call",scope="agent"} 1`, `forever_budget_sets_total 5`, `forever_chat_cost_dollars_total`,
		`forever_budget_parks_total{event="parked"} 1`, `forever_budget_parks_total{event="approved"} 1`} {
		if !strings.Contains(string(metrics), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// testRunawayBudget: a runaway agent, the local model calling the clock
// tool step after step, under a token budget stops before the first model
// call past the limit: turn.failed with code 402 while tool calls remain,
// with the spend (the usage of the calls made) past the limit by less than
// the last call used.
func testRunawayBudget(t *testing.T, nc *nats.Conn) {
	const agent = "budget-runaway"
	req := func(verb string, payload any, out any) {
		t.Helper()
		var data []byte
		if payload != nil {
			data, _ = json.Marshal(payload)
		}
		m, err := nc.Request("forever.cmd."+agent+"."+verb, data, 20*time.Second)
		if err != nil || m.Header.Get("Nats-Service-Error-Code") != "" {
			t.Fatalf("%s: %v %s", verb, err, m.Data)
		}
		if out != nil {
			if err := json.Unmarshal(m.Data, out); err != nil {
				t.Fatalf("%s reply %s: %v", verb, m.Data, err)
			}
		}
	}
	const limit = 300
	req("budget", map[string]any{"tokens": limit, "soft": 1}, nil)
	const calls = 19 // one step each: a turn has at most 20
	req("chat", map[string]string{"text": strings.Repeat("/tool clock {}\n", calls)}, nil)

	type logPage struct {
		Events []struct {
			Type string          `json:"type"`
			Data json.RawMessage `json:"data"`
		} `json:"events"`
	}
	var failed struct {
		Error string `json:"error"`
		Code  int    `json:"code"`
	}
	var page logPage
	waitfor.True(t, "the runaway turn to end", func() bool {
		page = logPage{}
		req("log", map[string]any{"type": "turn.", "limit": 100}, &page)
		n := len(page.Events)
		return n > 0 && page.Events[n-1].Type != "turn.started"
	})
	last := page.Events[len(page.Events)-1]
	if last.Type != "turn.failed" {
		t.Fatalf("the runaway turn ended with %s, want turn.failed", last.Type)
	}
	if err := json.Unmarshal(last.Data, &failed); err != nil {
		t.Fatal(err)
	}
	if failed.Code != http.StatusPaymentRequired || !strings.Contains(failed.Error, "token budget of 300 tokens per 24h") {
		t.Fatalf("turn.failed = %+v, want code 402 naming the budget", failed)
	}
	var msgs struct {
		Messages []chat.Message `json:"messages"`
	}
	req("messages", nil, &msgs)
	ran := 0
	for _, m := range msgs.Messages {
		for _, p := range m.Parts {
			if p.Type == chat.PartTool && p.State == chat.ToolOutput {
				ran++
			}
		}
	}
	if ran == 0 || ran >= calls {
		t.Fatalf("%d clock calls ran, want some but fewer than the %d asked: the budget stops the loop", ran, calls)
	}
	var u chathost.UsageReply
	req("usage", nil, &u)
	spent := u.Input + u.Output
	t.Logf("stopped after %d tool calls at %d tokens of %d", ran, spent, limit)
	if spent < limit || u.Budget == nil || u.Budget.Spent.Tokens != spent {
		t.Fatalf("usage %+v: want at least %d tokens, the budget's spend", u, limit)
	}
}

// testSoftBudget: an agent given {"tokens":600,"soft":0.5} answers chats
// until its spend reaches 300 tokens; the next turn parks before its model
// call: a broadcast says why, approvals lists it (kind budget), agentd
// approve with its id continues the same turn to its answer, and the spend
// is the sum of usage.
func testSoftBudget(t *testing.T, nc *nats.Conn, bin, natsAddr string) {
	const agent = "budget-soft"
	start := time.Now()
	send := func(verb string, payload any, out any) {
		t.Helper()
		var data []byte
		if payload != nil {
			data, _ = json.Marshal(payload)
		}
		m, err := nc.Request("forever.cmd."+agent+"."+verb, data, 20*time.Second)
		if err != nil || m.Header.Get("Nats-Service-Error-Code") != "" {
			t.Fatalf("%s: %v %s", verb, err, m.Data)
		}
		if out != nil {
			if err := json.Unmarshal(m.Data, out); err != nil {
				t.Fatalf("%s reply %s: %v", verb, m.Data, err)
			}
		}
	}
	bcast, err := nc.SubscribeSync("forever.bcast." + agent)
	if err != nil {
		t.Fatal(err)
	}
	defer bcast.Unsubscribe()
	var st chat.BudgetStatus
	send("budget", map[string]any{"tokens": 600, "soft": 0.5}, &st)
	if !st.SoftEnforced || st.Soft != 0.5 {
		t.Fatalf("budget = %+v, want soft 0.5 enforced", st)
	}
	var (
		u       chathost.UsageReply
		pending chathost.Approvals
		parked  chathost.Reply
	)
	for i := 0; len(pending.Approvals) == 0; i++ {
		if i == 40 {
			t.Fatalf("40 chats used %d tokens without a park", u.Input+u.Output)
		}
		var r chathost.Reply
		send("chat", map[string]string{"text": "hello, this is message number " + string(rune('a'+i%26))}, &r)
		waitfor.NoError(t, func() error {
			if send("approvals", nil, &pending); len(pending.Approvals) > 0 {
				parked = r
				return nil
			}
			if send("usage", nil, &u); u.Turns != i+1 {
				return fmt.Errorf("turn %d to be recorded or parked: %+v", i, u)
			}
			return nil
		})
	}
	p := pending.Approvals[0]
	if len(pending.Approvals) != 1 || p.Kind != chat.ApprovalKindBudget || p.RequestID != parked.RequestID || !strings.Contains(p.Reason, "50% of agent budget-soft's token budget of 600 tokens") {
		t.Fatalf("approvals = %+v, want the park of turn %s", pending, parked.RequestID)
	}
	if u.Input+u.Output < 300 {
		t.Fatalf("parked at %d tokens, below the soft limit of 300", u.Input+u.Output)
	}
	m, err := bcast.NextMsg(10 * time.Second)
	if err != nil || !strings.Contains(string(m.Data), `"kind":"budget.parked"`) || !strings.Contains(string(m.Data), p.ApprovalID) {
		t.Fatalf("broadcast of the park: %v %s", err, m.Data)
	}
	// agentd approve names the park where a tool call id goes, and prints
	// the parked turn's stream to its end.
	out, err := exec.Command(bin, "approve", agent, p.ApprovalID, "--server", "nats://"+natsAddr).CombinedOutput()
	if err != nil || len(out) == 0 {
		t.Fatalf("agentd approve %s: %v\n%s", p.ApprovalID, err, out)
	}
	turns := u.Turns + 1
	waitfor.NoError(t, func() error {
		if send("usage", nil, &u); u.Turns != turns {
			return fmt.Errorf("the approved turn to complete: %+v", u)
		}
		return nil
	})
	send("approvals", nil, &pending)
	st = chat.BudgetStatus{}
	send("budget", nil, &st)
	if len(pending.Approvals) != 0 || st.Spent.Tokens != u.Input+u.Output || st.Spent.Cost != u.Cost {
		t.Fatalf("after the approval: approvals %+v, budget spent %+v, usage %d+%d tokens %s", pending, st.Spent, u.Input, u.Output, u.Cost)
	}
	t.Logf("parked at turn %d, %d tokens spent after it, in %s", turns, st.Spent.Tokens, time.Since(start).Round(time.Millisecond))
}
