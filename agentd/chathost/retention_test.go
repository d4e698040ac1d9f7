package chathost

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/forever-agents/forever/agentd/agentdtest"
	"github.com/forever-agents/forever/internal/waitfor"
)

// The daemon runs chunk retention on the agent's owner: a chat stream that
// ended more than --chunk-max-age ago is purged and marked expired, and a
// resume of it answers 410 Gone.
func TestRetentionExpiresEndedStreams(t *testing.T) {
	cfg := agentdtest.Config(t)
	cfg.ChunkMaxAge = 200 * time.Millisecond
	d, chats := newChatDaemon(t, cfg, -1, AttachRetention, AttachGateway)
	agentdtest.Start(t, d)
	base := "http://" + d.HTTPAddr()
	agentdtest.WaitStatus(t, base+"/readyz", 200)

	resp := agentdtest.Post(t, t.Context(), base+"/v1/chat", `{"id":"c1","messages":[{"id":"u1","role":"user","parts":[{"type":"text","text":"hi"}]}]}`)
	evs := agentdtest.ReadSSE(t, resp.Body, 0)
	resp.Body.Close()
	if len(evs) == 0 || evs[len(evs)-1].Data != "[DONE]" {
		t.Fatalf("turn did not finish: %+v", evs)
	}

	waitfor.NoError(t, func() error {
		info, err := chats.Store().Streams().Latest("c1")
		if err == nil && info.Expired {
			return nil
		}
		return fmt.Errorf("the stream to expire: %+v, %v", info, err)
	})
	req, _ := http.NewRequestWithContext(t.Context(), "GET", base+"/v1/chat/c1/stream?after=0", nil)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	var body struct {
		Code  int    `json:"code"`
		Error string `json:"error"`
	}
	if res.StatusCode != http.StatusGone || json.Unmarshal(b, &body) != nil || body.Code != http.StatusGone || !strings.HasPrefix(body.Error, "chunks expired") {
		t.Fatalf("resume: %d %s, want 410 {\"code\":410,\"error\":\"chunks expired...\"}", res.StatusCode, b)
	}
}
