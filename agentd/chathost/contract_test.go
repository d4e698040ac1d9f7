package chathost

import (
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/forever-agents/forever/agentd/agentdtest"
	"github.com/forever-agents/forever/internal/apierror/apierrortest"
)

// TestErrorContract: each bad request of the contract gets the one error
// shape, {"code","error"}, with the same code over NATS and over HTTP,
// and a sentence that names no Go type or package: bad JSON, a wrong
// type, an unknown verb or path, an oversized message, a bad agent id.
func TestErrorContract(t *testing.T) {
	d, _ := newAgentsDaemon(t, agentdtest.Config(t))
	nc, err := nats.Connect(d.NATSURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	base := "http://" + d.HTTPAddr()
	long := strings.Repeat("a", 300)
	big := strings.Repeat("x", 600<<10)

	for _, tt := range []struct {
		name    string
		subject string // NATS
		payload string
		method  string // HTTP
		path    string
		body    string
		code    int
	}{
		{"bad JSON", "forever.cmd.a1.chat", `{"text":`, "POST", "/v1/chat", `{"id":"a1","messages":[`, 400},
		{"wrong type", "forever.cmd.a1.chat", `{"text":1}`, "POST", "/v1/chat",
			`{"id":"a1","messages":[{"id":"u1","role":"user","parts":[{"type":"text","text":5}]}]}`, 400},
		{"wrong type of state", "forever.cmd.a1.state", `{"value":1,"expectVersion":"x"}`, "", "", "", 400},
		{"unknown verb", "forever.cmd.a1.nope", ``, "GET", "/v1/agents/a1/nope", "", 404},
		{"malformed subject", "forever.cmd.a.b.status", ``, "GET", "/v1/nope", "", 404},
		{"oversize", "forever.cmd.a1.chat", `{"text":"` + big + `"}`, "POST", "/v1/chat",
			`{"id":"a1","messages":[{"id":"u1","role":"user","parts":[{"type":"text","text":"` + big + `"}]}]}`, 413},
		{"agent id too long", "forever.cmd." + long + ".status", ``, "GET", "/v1/chat/" + long + "/messages", "", 400},
	} {
		t.Run(tt.name, func(t *testing.T) {
			msg, err := nc.Request(tt.subject, []byte(tt.payload), 10*time.Second)
			if err != nil {
				t.Fatalf("NATS %s: %v", tt.subject, err)
			}
			if got := msg.Header.Get("Nats-Service-Error-Code"); got != strconv.Itoa(tt.code) {
				t.Errorf("NATS %s: code header %q, want %d: %s", tt.name, got, tt.code, msg.Data)
			}
			t.Logf("NATS: %s", apierrortest.CheckBody(t, "NATS "+tt.name, tt.code, msg.Data))
			if tt.method == "" {
				return
			}
			req, _ := http.NewRequest(tt.method, base+tt.path, strings.NewReader(tt.body))
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tt.code {
				t.Errorf("HTTP %s: status %d, want %d: %s", tt.name, resp.StatusCode, tt.code, b)
			}
			t.Logf("HTTP: %s", apierrortest.CheckBody(t, "HTTP "+tt.name, tt.code, b))
		})
	}
}
