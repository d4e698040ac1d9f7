package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/forever-agents/forever/agentd/agentdtest"
	"github.com/forever-agents/forever/agentd/chathost"
	"github.com/forever-agents/forever/chat"
	"github.com/forever-agents/forever/chat/chunk"
	"github.com/forever-agents/forever/internal/waitfor"
	"github.com/nats-io/nats.go"
)

// testBinaryMultitask runs on the Gateway subtest's daemon (--local-rate
// 100): two chats 50 ms apart on one agent, the second with a multitask
// policy, over NATS and over HTTP, give the documented outcome.
func testBinaryMultitask(t *testing.T, httpAddr, natsAddr string) {
	nc, err := nats.Connect("nats://" + natsAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	// gap is the 50 ms between two messages that the multitask issue
	// names: the scenario, not a synchronisation (a chat's reply already
	// says that its turn started).
	gap := func() { time.Sleep(50 * time.Millisecond) } // not a synchronisation: the scenario's 50 ms gap
	cmd := func(agent, verb string, v any) (map[string]any, string) {
		t.Helper()
		body, _ := json.Marshal(v)
		msg, err := nc.Request("forever.cmd."+agent+"."+verb, body, 30*time.Second)
		if err != nil {
			t.Fatalf("%s %s: %v", agent, verb, err)
		}
		var out map[string]any
		_ = json.Unmarshal(msg.Data, &out)
		return out, msg.Header.Get("Nats-Service-Error-Code")
	}
	chat := func(agent string, v any) map[string]any {
		t.Helper()
		out, code := cmd(agent, "chat", v)
		if code != "" {
			t.Fatalf("chat %s %v: %s %v", agent, v, code, out)
		}
		return out
	}
	base := "http://" + httpAddr + "/v1/chat"

	t.Run("NATS", func(t *testing.T) {
		// reject (the default): 409, nothing stored.
		chat("mt-r", map[string]string{"text": "first"})
		gap()
		if out, code := cmd("mt-r", "chat", map[string]string{"text": "second"}); code != "409" {
			t.Fatalf("second chat without multitask: %s %v", code, out)
		}
		if out, code := cmd("mt-r", "chat", map[string]string{"text": "x", "multitask": "later"}); code != "400" || !strings.Contains(fmt.Sprint(out["error"]), "use one of reject, interrupt, enqueue, steer, rollback, merge, debounce") {
			t.Fatalf("an unknown policy: %s %v", code, out)
		}
		// interrupt: the first turn ends aborted with its partial kept.
		first := chat("mt-i", map[string]string{"text": "Tell me a story"})
		gap()
		second := chat("mt-i", map[string]string{"text": "hello", "multitask": "interrupt"})
		msgs := waitMessages(t, base, "mt-i", 4)
		if msgs[0] != "user:Tell me a story" || !strings.HasPrefix(msgs[1], "assistant:") || msgs[1] == "assistant:" ||
			msgs[2] != "user:hello" || !strings.Contains(msgs[3], `"hello"`) {
			t.Fatalf("messages %q", msgs)
		}
		st := streamStatuses(t, cmd, "mt-i")
		if st[first["streamId"].(string)] != "aborted" || st[second["streamId"].(string)] != "completed" || len(st) != 2 {
			t.Fatalf("streams %v", st)
		}
		// enqueue: acknowledged at once, answered in order, once each.
		chat("mt-q", map[string]string{"text": "m0"})
		gap()
		var queued []string
		for _, text := range []string{"m1", "m2", "m3"} {
			queued = append(queued, chat("mt-q", map[string]string{"text": text, "multitask": "enqueue"})["streamId"].(string))
		}
		msgs = waitMessages(t, base, "mt-q", 8)
		for i := range 4 {
			if msgs[2*i] != fmt.Sprintf("user:m%d", i) || !strings.Contains(msgs[2*i+1], fmt.Sprintf("m%d", i)) {
				t.Fatalf("messages %q", msgs)
			}
		}
		st = streamStatuses(t, cmd, "mt-q")
		for _, s := range queued {
			if st[s] != "completed" {
				t.Fatalf("queued stream %s: %v", s, st)
			}
		}
		if len(st) != 4 {
			t.Fatalf("streams %v", st)
		}
		// steer: the second message joins the running turn, whose next
		// model call echoes it; one turn, one stream.
		first = chat("mt-s", map[string]string{"text": "first question"})
		gap()
		second = chat("mt-s", map[string]string{"text": "a second thought", "multitask": "steer"})
		if second["streamId"] != first["streamId"] {
			t.Fatalf("steer reply %v, want the running turn %v", second, first)
		}
		msgs = waitMessages(t, base, "mt-s", 3)
		if msgs[0] != "user:first question" || msgs[1] != "user:a second thought" || !strings.Contains(msgs[2], `"a second thought"`) {
			t.Fatalf("messages %q", msgs)
		}
		if st = streamStatuses(t, cmd, "mt-s"); len(st) != 1 || st[first["streamId"].(string)] != "completed" {
			t.Fatalf("streams %v", st)
		}
		// rollback: the first turn ends aborted and leaves the
		// conversation; the second message is answered.
		first = chat("mt-b", map[string]string{"text": "Tell me a story"})
		gap()
		second = chat("mt-b", map[string]string{"text": "hello", "multitask": "rollback"})
		if msgs = waitMessages(t, base, "mt-b", 2); msgs[0] != "user:hello" || !strings.Contains(msgs[1], `"hello"`) {
			t.Fatalf("messages %q", msgs)
		}
		st = streamStatuses(t, cmd, "mt-b")
		if st[first["streamId"].(string)] != "aborted" || st[second["streamId"].(string)] != "completed" || len(st) != 2 {
			t.Fatalf("streams %v", st)
		}
		// merge: two chats 50 ms apart while a turn runs are acknowledged
		// with one next turn, which answers both.
		first = chat("mt-m", map[string]string{"text": "Tell me a story"})
		gap()
		second = chat("mt-m", map[string]string{"text": "m1", "multitask": "merge"})
		gap()
		third := chat("mt-m", map[string]string{"text": "m2", "multitask": "merge"})
		if second["streamId"] != third["streamId"] || second["streamId"] == first["streamId"] {
			t.Fatalf("merge replies %v / %v, want one next turn", second, third)
		}
		msgs = waitMessages(t, base, "mt-m", 5)
		if msgs[0] != "user:Tell me a story" || msgs[2] != "user:m1" || msgs[3] != "user:m2" || !strings.Contains(msgs[4], `"m2"`) {
			t.Fatalf("messages %q", msgs)
		}
		if st = streamStatuses(t, cmd, "mt-m"); len(st) != 2 || st[third["streamId"].(string)] != "completed" {
			t.Fatalf("streams %v", st)
		}
		// debounce: two chats 50 ms apart to an idle agent become one
		// turn (the first names a 2 s quiet window).
		first = chat("mt-d", map[string]any{"text": "m1", "multitask": "debounce", "debounceMs": 2000})
		gap()
		second = chat("mt-d", map[string]string{"text": "m2", "multitask": "debounce"})
		if second["streamId"] != first["streamId"] {
			t.Fatalf("debounce replies %v / %v, want one turn", first, second)
		}
		msgs = waitMessages(t, base, "mt-d", 3)
		if msgs[0] != "user:m1" || msgs[1] != "user:m2" || !strings.Contains(msgs[2], `"m2"`) {
			t.Fatalf("messages %q", msgs)
		}
		if st = streamStatuses(t, cmd, "mt-d"); len(st) != 1 {
			t.Fatalf("streams %v", st)
		}
	})

	t.Run("HTTP", func(t *testing.T) {
		body := func(id, msgID, text, multitask string) string {
			b, _ := json.Marshal(map[string]any{"id": id, "multitask": multitask,
				"messages": []any{map[string]any{"id": msgID, "role": "user", "parts": []any{map[string]string{"type": "text", "text": text}}}}})
			return string(b)
		}
		// interrupt, from the Forever-Multitask header.
		firstDone := make(chan []agentdtest.SSEEvent, 1)
		resp := agentdtest.Post(t, t.Context(), base, body("mt-hi", "u1", "Tell me a story", ""))
		go func() { defer resp.Body.Close(); firstDone <- agentdtest.ReadSSE(t, resp.Body, 0) }()
		gap()
		req, _ := http.NewRequestWithContext(t.Context(), "POST", base, strings.NewReader(body("mt-hi", "u2", "hello", "")))
		req.Header.Set("content-type", "application/json")
		req.Header.Set("Forever-Multitask", "interrupt")
		resp2, err := http.DefaultClient.Do(req)
		if err != nil || resp2.StatusCode != 200 {
			t.Fatalf("interrupting POST: %v %v", resp2.StatusCode, err)
		}
		second := agentdtest.ReadSSE(t, resp2.Body, 0)
		resp2.Body.Close()
		first := <-firstDone
		if typ := lastChunkType(t, first); typ != "abort" {
			t.Fatalf("first stream ended with %q", typ)
		}
		if typ := lastChunkType(t, second); typ != "finish" || !strings.Contains(sseText(t, second), `"hello"`) {
			t.Fatalf("second stream ended with %q: %q", typ, sseText(t, second))
		}
		if msgs := waitMessages(t, base, "mt-hi", 4); msgs[2] != "user:hello" {
			t.Fatalf("messages %q", msgs)
		}
		// enqueue, from the body: both streams complete, in order.
		resp = agentdtest.Post(t, t.Context(), base, body("mt-hq", "u1", "m0", ""))
		go func() { defer resp.Body.Close(); firstDone <- agentdtest.ReadSSE(t, resp.Body, 0) }()
		gap()
		resp2 = agentdtest.Post(t, t.Context(), base, body("mt-hq", "u2", "m1", "enqueue"))
		second = agentdtest.ReadSSE(t, resp2.Body, 0)
		resp2.Body.Close()
		first = <-firstDone
		if lastChunkType(t, first) != "finish" || lastChunkType(t, second) != "finish" || !strings.Contains(sseText(t, second), "m1") {
			t.Fatalf("streams %q / %q", sseText(t, first), sseText(t, second))
		}
		if msgs := waitMessages(t, base, "mt-hq", 4); msgs[0] != "user:m0" || msgs[2] != "user:m1" {
			t.Fatalf("messages %q", msgs)
		}
		// steer: both responses stream the one turn, which reads the
		// second message.
		resp = agentdtest.Post(t, t.Context(), base, body("mt-hs", "u1", "first question", ""))
		go func() { defer resp.Body.Close(); firstDone <- agentdtest.ReadSSE(t, resp.Body, 0) }()
		gap()
		resp2 = agentdtest.Post(t, t.Context(), base, body("mt-hs", "u2", "a second thought", "steer"))
		second = agentdtest.ReadSSE(t, resp2.Body, 0)
		resp2.Body.Close()
		first = <-firstDone
		if lastChunkType(t, second) != "finish" || sseText(t, first) != sseText(t, second) || !strings.Contains(sseText(t, second), `"a second thought"`) {
			t.Fatalf("streams %q / %q", sseText(t, first), sseText(t, second))
		}
		// merge, from the body: the two responses sent while the first
		// turn runs stream the one turn that answers both.
		post := func(agent, msgID, text, multitask string, header bool) <-chan []agentdtest.SSEEvent {
			b := body(agent, msgID, text, multitask)
			if header {
				// The policy from the header, a 2 s window from the body.
				b = strings.Replace(body(agent, msgID, text, ""), `"multitask":""`, `"multitask":"","debounceMs":2000`, 1)
			}
			req, _ := http.NewRequestWithContext(t.Context(), "POST", base, strings.NewReader(b))
			req.Header.Set("content-type", "application/json")
			if header {
				req.Header.Set("Forever-Multitask", multitask)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil || resp.StatusCode != 200 {
				t.Fatalf("POST %s %s: %v %v", agent, text, resp, err)
			}
			done := make(chan []agentdtest.SSEEvent, 1)
			go func() { defer resp.Body.Close(); done <- agentdtest.ReadSSE(t, resp.Body, 0) }()
			return done
		}
		r0 := post("mt-hm", "u0", "Tell me a story", "", false)
		gap()
		r1 := post("mt-hm", "u1", "m1", "merge", false)
		gap()
		r2 := post("mt-hm", "u2", "m2", "merge", false)
		s0, s1, s2 := <-r0, <-r1, <-r2
		if lastChunkType(t, s0) != "finish" || lastChunkType(t, s2) != "finish" || sseText(t, s1) != sseText(t, s2) || !strings.Contains(sseText(t, s2), `"m2"`) {
			t.Fatalf("merge streams %q / %q / %q", sseText(t, s0), sseText(t, s1), sseText(t, s2))
		}
		if msgs := waitMessages(t, base, "mt-hm", 5); msgs[2] != "user:m1" || msgs[3] != "user:m2" {
			t.Fatalf("messages %q", msgs)
		}
		// debounce, from the Forever-Multitask header: two POSTs 50 ms
		// apart to an idle agent stream one turn.
		r1 = post("mt-hd", "u1", "m1", "debounce", true)
		gap()
		r2 = post("mt-hd", "u2", "m2", "debounce", true)
		s1, s2 = <-r1, <-r2
		if lastChunkType(t, s1) != "finish" || sseText(t, s1) != sseText(t, s2) || !strings.Contains(sseText(t, s2), `"m2"`) {
			t.Fatalf("debounce streams %q / %q", sseText(t, s1), sseText(t, s2))
		}
		if msgs := waitMessages(t, base, "mt-hd", 3); msgs[0] != "user:m1" || msgs[1] != "user:m2" {
			t.Fatalf("messages %q", msgs)
		}
	})
}

// waitMessages polls the agent's conversation until it holds n messages
// and its last is an answer, and returns them as "role:text".
func waitMessages(t *testing.T, base, agent string, n int) []string {
	t.Helper()
	var out []string
	waitfor.NoError(t, func() error {
		var page struct {
			Messages []struct {
				Role  string `json:"role"`
				Parts []struct {
					Type, Text string
				} `json:"parts"`
			} `json:"messages"`
		}
		code, body := agentdtest.Get(t, base+"/"+agent+"/messages")
		if code == 200 && json.Unmarshal([]byte(body), &page) == nil && len(page.Messages) >= n && page.Messages[len(page.Messages)-1].Role == "assistant" {
			out = nil
			for _, m := range page.Messages {
				var text string
				for _, p := range m.Parts {
					text += p.Text
				}
				out = append(out, m.Role+":"+text)
			}
			if len(out) != n {
				t.Fatalf("%d messages, want %d: %q", len(out), n, out)
			}
			return nil
		}
		return fmt.Errorf("%s to hold %d messages, the last an answer: %d %s", agent, n, code, body)
	})
	return out
}

// streamStatuses is the agent's streams' statuses by stream id.
func streamStatuses(t *testing.T, cmd func(agent, verb string, v any) (map[string]any, string), agent string) map[string]string {
	t.Helper()
	out, code := cmd(agent, "streams", map[string]any{})
	if code != "" {
		t.Fatalf("streams: %s %v", code, out)
	}
	st := map[string]string{}
	list, _ := out["streams"].([]any)
	for _, s := range list {
		m, _ := s.(map[string]any)
		st[fmt.Sprint(m["stream"])] = fmt.Sprint(m["status"])
	}
	return st
}

// lastChunkType is the type of an SSE response's last chunk before [DONE].
func lastChunkType(t *testing.T, evs []agentdtest.SSEEvent) string {
	t.Helper()
	if n := len(evs); n < 2 || evs[n-1].Data != "[DONE]" {
		t.Fatalf("stream without [DONE]: %+v", evs)
	}
	typ, _ := agentdtest.ChunkType(t, evs[len(evs)-2])
	return typ
}

// sseText is the text an SSE response's deltas build.
func sseText(t *testing.T, evs []agentdtest.SSEEvent) string {
	t.Helper()
	var text string
	for _, e := range evs {
		var c struct{ Type, Delta string }
		if json.Unmarshal([]byte(e.Data), &c) == nil && c.Type == "text-delta" {
			text += c.Delta
		}
	}
	return text
}

// queueBeforeKill starts a long turn on agent and enqueues n messages
// behind it ("m1".."mn"), on ChatCrashRecovery's daemon before its SIGKILL.
func queueBeforeKill(t *testing.T, c *crashClient, agent string, n int) []chathost.Reply {
	t.Helper()
	c.command(agent, "chat", map[string]string{"text": "Tell me a story about a queue."})
	var out []chathost.Reply
	for i := 1; i <= n; i++ {
		var r chathost.Reply
		if err := json.Unmarshal(c.command(agent, "chat", map[string]string{"text": fmt.Sprintf("m%d", i), "multitask": "enqueue"}), &r); err != nil || r.StreamID == "" {
			t.Fatalf("enqueue m%d: %+v %v", i, r, err)
		}
		out = append(out, r)
	}
	return out
}

// checkQueueAfterKill checks, after the restart, that the n queued
// messages were each answered once, in order, each in its own stream.
func checkQueueAfterKill(t *testing.T, c *crashClient, agent string, queued []chathost.Reply) {
	t.Helper()
	want := 2 * (len(queued) + 1)
	var page struct{ Messages []chat.Message }
	waitfor.Within(t, 60*time.Second, func() error {
		page.Messages = nil
		json.Unmarshal(c.command(agent, "messages", nil), &page)
		if n := len(page.Messages); n < want || page.Messages[n-1].Role != chat.RoleAssistant {
			return fmt.Errorf("the queued messages to be answered after the restart: %d messages", n)
		}
		return nil
	})
	if len(page.Messages) != want {
		t.Fatalf("%d messages, want %d", len(page.Messages), want)
	}
	for i, r := range queued {
		u, a := page.Messages[2*(i+1)], page.Messages[2*(i+1)+1]
		if u.Text() != fmt.Sprintf("m%d", i+1) || a.ID != r.MessageID || !strings.Contains(a.Text(), fmt.Sprintf("m%d", i+1)) {
			t.Fatalf("message %d: %q then %q (%s), want m%d answered in %s", 2*(i+1), u.Text(), a.Text(), a.ID, i+1, r.MessageID)
		}
		chunks := c.streamChunks(agent, r.StreamID)
		starts := 0
		for _, ch := range chunks {
			if ch.Type == chunk.Start {
				starts++
			}
		}
		if n := len(chunks); n == 0 || chunks[n-1].Type != chunk.Finish || starts != 1 {
			t.Fatalf("stream of m%d: %d chunks, %d starts", i+1, len(chunks), starts)
		}
	}
}
