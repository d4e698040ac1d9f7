package main

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/forever-agents/forever/agentd"
	"github.com/forever-agents/forever/agentd/audit"
	"github.com/forever-agents/forever/agentd/host"
	"github.com/forever-agents/forever/auth"
)

// testSecurityReplySubjects (issue 32): a reader's requests to a command,
// the listing and the JetStream API forwarder, with reply subjects that
// are an agent's event or chunk subject or a partition's epoch or lease
// key, change nothing. They are not answered (the reader's own
// subscription on the chunk subject gets nothing), the agents' logs stay
// empty, every partition is still leased and the writer still chats,
// agentd backup works, and the audit log shows each refusal.
func testSecurityReplySubjects(t *testing.T, e *secEnv, writer, reader cred) {
	nc, err := nats.Connect(e.natsURL, nats.UserCredentials(reader.Creds))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	chunks, err := nc.SubscribeSync("forever.chunk.zz.>")
	if err != nil {
		t.Fatal(err)
	}
	requests := []string{"forever.cmd.zz.status", "forever.list", auth.ClientAPIPrefix + ".INFO"}
	replies := []string{"forever.evt.zz", "forever.chunk.zz.s1", "$KV.FOREVER_PARTITIONS.epoch.0", "$KV.FOREVER_LEASES.lease.0"}
	for _, subject := range requests {
		for _, reply := range replies {
			if err := nc.PublishRequest(subject, reply, []byte(`{}`)); err != nil {
				t.Fatalf("%s with reply %s: %v", subject, reply, err)
			}
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	// Each refusal is audited before anything would be answered.
	waitAudit(t, e, func(recs []audit.Record) bool {
		for _, subject := range requests {
			for _, reply := range replies {
				found := false
				for _, r := range recs {
					found = found || r.Action == "reply.refused" && r.Tenant == writer.Tenant && r.Outcome == audit.Refused &&
						strings.Contains(r.Detail, subject) && strings.Contains(r.Detail, reply)
				}
				if !found {
					return false
				}
			}
		}
		return true
	})
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if n, _, _ := chunks.Pending(); n != 0 {
		t.Errorf("%d answers arrived on forever.chunk.zz.s1", n)
	}
	// An answer on an inbox still comes.
	if m, err := nc.Request("forever.cmd.zz.status", nil, 10*time.Second); err != nil || errCode(m) != "" {
		t.Fatalf("status with an inbox: %v", err)
	}
	code, body := e.get(t, "/v1/agents/zz/log", writer.Token)
	var page host.LogPage
	if err := json.Unmarshal([]byte(body), &page); code != 200 || err != nil || len(page.Events) != 0 {
		t.Errorf("log of zz after the refused requests: %d %.300s", code, body)
	}
	// Every partition is still leased, partition 0 (whose epoch and
	// lease keys were the reply subjects) included.
	deadline := time.Now().Add(20 * time.Second)
	for {
		m, err := nc.Request(host.ClusterSubject("forever"), nil, 10*time.Second)
		var info agentd.ClusterInfo
		if err == nil && errCode(m) == "" && json.Unmarshal(m.Data, &info) == nil && info.Partitions > 0 && len(info.Leases) == info.Partitions {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("partitions leased after the refused requests: %d of %d (%v)", len(info.Leases), info.Partitions, err)
		}
		time.Sleep(100 * time.Millisecond) // not a synchronisation: the interval of a poll on every partition leased
	}
	for i := range 4 { // a few agents, so more than one partition is asked
		agent := fmt.Sprintf("after-reply-%d", i)
		if code, body := e.post(t, writer.Token, agent, "still served"); code != 200 {
			t.Fatalf("chat on %s after the refused requests: %d %.200s", agent, code, body)
		}
		waitAnswered(t, e.httpAddr, writer.Token, agent, "still served")
	}
	runAgentdCLI(t, e.bin, "backup", "--out", filepath.Join(t.TempDir(), "backup"), "--nats-url", e.natsURL, "--creds", e.admin)
}

// testSecurityReaderMeta (issue 32): a reader's read verbs carrying a
// "meta" neither create an agent nor set an agent's user.
func testSecurityReaderMeta(t *testing.T, e *secEnv, writer, reader cred) {
	nc, err := nats.Connect(e.natsURL, nats.UserCredentials(reader.Creds))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	meta := []byte(`{"meta":{"user":"mallory","tags":["owned"]}}`)
	for _, agent := range []string{"bot", "meta-new"} {
		for _, verb := range []string{"messages", "approvals", "status"} {
			if _, err := nc.Request("forever.cmd."+agent+"."+verb, meta, 10*time.Second); err != nil {
				t.Fatalf("reader %s of %s with meta: %v", verb, agent, err)
			}
		}
	}
	for _, agent := range []string{"bot", "meta-new"} {
		code, body := e.get(t, "/v1/agents/"+agent+"/status", writer.Token)
		var st host.Status
		if err := json.Unmarshal([]byte(body), &st); code != 200 || err != nil {
			t.Fatalf("status of %s: %d %.300s", agent, code, body)
		}
		if st.Entry != nil && (st.Entry.User == "mallory" || strings.Contains(strings.Join(st.Entry.Tags, ","), "owned")) {
			t.Errorf("a reader's meta set %s's user context: %+v", agent, st.Entry)
		}
		if agent == "meta-new" && st.Entry != nil {
			t.Errorf("a reader's reads created agent %s: %+v", agent, st.Entry)
		}
	}
	if code, body := e.get(t, "/v1/agents?user=mallory", writer.Token); code != 200 || strings.Contains(body, `"agent"`) {
		t.Errorf("agents of user mallory: %d %.300s", code, body)
	}
}

// testSecurityReadsCountNoAgent (issue 34): under a tenant with
// --max-agents 2, a reader's reads of tools and status of 5 unseen agents
// count none, and the tenant's writer then chats on 2 new agents (a
// third is refused: the quota holds).
func testSecurityReadsCountNoAgent(t *testing.T, e *secEnv) {
	// Small storage quotas: the node's JetStream memory is shared by the
	// subtests' tenants (BytesAdmission creates one more after this).
	writer := e.mint(t, "few2", "--max-agents", "2", "--max-memory", "8MiB", "--max-bytes", "4MiB")
	reader := e.mint(t, "few2", "--role", "reader", "--token-name", "few2ro")
	for i := range 5 {
		for _, read := range []string{"tools", "status"} {
			if code, body := e.get(t, fmt.Sprintf("/v1/agents/unseen%d/%s", i, read), reader.Token); code == 429 {
				t.Fatalf("reader %s of unseen%d: %d %.200s", read, i, code, body)
			}
		}
	}
	for i := range 2 {
		agent := fmt.Sprintf("counted%d", i)
		if code, body := e.post(t, writer.Token, agent, "within the quota"); code != 200 {
			t.Fatalf("writer chat on %s after the reader's reads: %d %.200s", agent, code, body)
		}
	}
	if code, body := e.post(t, writer.Token, "counted2", "past the quota"); code != 429 {
		t.Errorf("a third agent under --max-agents 2: %d %.200s", code, body)
	}
}

// waitAudit waits (20 s at most) until the audit log's records satisfy ok.
func waitAudit(t *testing.T, e *secEnv, ok func([]audit.Record) bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(200 * time.Millisecond) { // not a synchronisation: the interval of a poll on the audit records
		out, err := exec.Command(e.bin, "audit", "tail", "-n", "0", "--nats-url", e.natsURL, "--creds", e.admin).Output()
		if err != nil {
			t.Fatalf("audit tail: %v", err)
		}
		var recs []audit.Record
		for line := range strings.Lines(string(out)) {
			var r audit.Record
			if err := json.Unmarshal([]byte(line), &r); err != nil {
				t.Fatalf("audit tail printed %q", line)
			}
			recs = append(recs, r)
		}
		if ok(recs) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the audit log lacks the expected records among %d:\n%s", len(recs), out)
		}
	}
}
