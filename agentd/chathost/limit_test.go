package chathost

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/forever-agents/forever/agentd/agentdtest"
)

// TestOneSizeLimit: a chat over the one size limit (host.MaxCommandBytes)
// is refused 413 with the same sentence over NATS and over HTTP, and
// nothing of it is stored.
func TestOneSizeLimit(t *testing.T) {
	d, chats := newAgentsDaemon(t, agentdtest.Config(t))
	nc, err := nats.Connect(d.NATSURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	big := strings.Repeat("x", 600<<10)
	const want = "; the limit is 524288 bytes (512 KiB)"

	payload, _ := json.Marshal(map[string]string{"text": big})
	msg, err := nc.Request("forever.cmd.big.chat", payload, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var body struct {
		Code  int
		Error string
	}
	if err := json.Unmarshal(msg.Data, &body); err != nil || body.Code != 413 || !strings.HasPrefix(body.Error, "the request is ") || !strings.HasSuffix(body.Error, want) {
		t.Errorf("NATS: %.200s", msg.Data)
	}

	ui, _ := json.Marshal(map[string]any{"id": "big", "messages": []any{map[string]any{
		"id": "u1", "role": "user", "parts": []any{map[string]any{"type": "text", "text": big}}}}})
	resp, err := http.Post("http://"+d.HTTPAddr()+"/v1/chat", "application/json", strings.NewReader(string(ui)))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body.Code, body.Error = 0, ""
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || resp.StatusCode != 413 || body.Code != 413 ||
		!strings.HasPrefix(body.Error, "the request is ") || !strings.HasSuffix(body.Error, want) {
		t.Errorf("HTTP: %d %+v %v", resp.StatusCode, body, err)
	}
	if msgs, err := chats.Store().History("big"); err != nil || len(msgs) != 0 {
		t.Errorf("stored %d messages (%v)", len(msgs), err)
	}
}
