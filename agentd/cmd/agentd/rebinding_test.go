package main

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/forever-agents/forever/agentd/agentdtest"
	"github.com/forever-agents/forever/agentd/demo"
	"github.com/forever-agents/forever/internal/apierror/apierrortest"
)

// testBinaryDNSRebinding: with auth off (the quick start), a request whose
// Host is another site's, as a page there sends it after rebinding its
// name to 127.0.0.1, gets 403 before anything runs: no turn starts, the
// note tool writes nothing. Loopback names and --allowed-host pass, and the
// probes answer any Host.
func testBinaryDNSRebinding(t *testing.T, bin string) {
	data := filepath.Join(t.TempDir(), "data")
	httpAddr, natsAddr := agentdtest.FreeAddr(t), agentdtest.FreeAddr(t)
	startAgentd(t, bin, data, httpAddr, natsAddr, "--local-rate", "-1", "--allowed-host", "app.example.com")
	_, port, _ := strings.Cut(httpAddr, ":")
	do := func(method, path, host, origin, body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, "http://"+httpAddr+path, strings.NewReader(body))
		req.Host = host
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b strings.Builder
		buf := make([]byte, 4096)
		for {
			n, err := resp.Body.Read(buf)
			b.Write(buf[:n])
			if err != nil {
				break
			}
		}
		return resp.StatusCode, b.String()
	}
	note := `{"id":"victim","messages":[{"id":"m1","role":"user","parts":[{"type":"text","text":"/tool note {\"text\":\"pwned\"}"}]}]}`
	evil := "evil.example:" + port
	code, body := do("POST", "/v1/chat", evil, "http://"+evil, note)
	if code != http.StatusForbidden {
		t.Fatalf("a rebound Host got %d %s, want 403", code, body)
	}
	apierrortest.CheckBody(t, "rebound host", 403, []byte(body))
	for _, path := range []string{"/v1/chat/victim/messages", "/"} {
		if code, body := do("GET", path, evil, "", ""); code != http.StatusForbidden {
			t.Errorf("GET %s with a rebound Host: %d %s, want 403", path, code, body)
		}
	}
	if _, err := os.Stat(filepath.Join(data, demo.NotesFile)); err == nil {
		t.Fatal("the note tool ran for a rebound Host")
	}
	// Probes answer whatever Host a kubelet sends (the pod's IP).
	for _, path := range []string{"/healthz", "/readyz"} {
		if code, body := do("GET", path, "10.1.2.3:"+port, "", ""); code != http.StatusOK {
			t.Errorf("GET %s with a pod IP as Host: %d %s, want 200", path, code, body)
		}
	}
	// Loopback names and --allowed-host are served.
	for _, h := range []string{"localhost:" + port, "127.0.0.1:" + port, "app.example.com"} {
		if code, body := do("GET", "/v1/chat/victim/messages", h, "", ""); code != http.StatusOK {
			t.Errorf("GET with Host %s: %d %s, want 200", h, code, body)
		}
	}
}
