package chartcheck_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// TestNotesCommands follows the install notes as far as they run without a
// cluster: their exact "agentd tenant create ... --out -" line, run against
// an agentd with auth as in a pod (NATS_URL standing for the pod's
// own server), gives a creds file on stdout and the token on stderr; their
// nats request chats with the creds, and the token reads the chat over
// HTTP.
func TestNotesCommands(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs agentd")
	}
	helm := helmBinary(t)
	notes := installNotes(t, helm)
	create := regexp.MustCompile(`(?m)^\s*kubectl -n agents exec forever-0 -- (agentd tenant create .*) > (\S+) 2> (\S+)$`).FindStringSubmatch(notes)
	request := regexp.MustCompile(`(?m)^\s*nats --creds (\S+) req (forever\.cmd\.\S+\.chat) '(.*)'$`).FindStringSubmatch(notes)
	if create == nil || request == nil {
		t.Fatalf("no tenant create line with > creds 2> json, or no nats chat request, in the notes:\n%s", notes)
	}
	if request[1] != create[2] {
		t.Errorf("the notes write the creds to %s and chat with %s", create[2], request[1])
	}

	bin := buildAgentd(t)
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	// Under --auth /metrics has a listener of its own, by default on a
	// fixed loopback port another test or agentd may hold: take a free one.
	a := startAgentd(t, bin, "--data", data, "--http", "127.0.0.1:0", "--nats-listen", "127.0.0.1:0",
		"--metrics-listen", "127.0.0.1:0", "--auth", "--local-rate", "-1", "--log-format", "json")
	args := strings.Fields(strings.ReplaceAll(create[1], "/data/", data+"/"))
	cmd := exec.Command(bin, args[1:]...)
	cmd.Dir = dir // a --out that is not "-" writes here, not in the package
	cmd.Env = append(os.Environ(), "NATS_URL="+a.natsURL)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s: %v\n%s", create[1], err, stderr.String())
	}
	if !strings.Contains(stdout.String(), "BEGIN NATS USER JWT") {
		t.Fatalf("%s printed no creds file on stdout: stdout %q", create[1], stdout.String())
	}
	var summary struct{ Tenant, Token string }
	if err := json.Unmarshal(bytes.TrimSpace(stderr.Bytes()), &summary); err != nil || summary.Tenant != "demo" || summary.Token == "" {
		t.Fatalf("stderr %q is not the JSON summary with the token (%v)", stderr.String(), err)
	}
	creds := filepath.Join(dir, create[2])
	if err := os.WriteFile(creds, stdout.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}

	nc, err := nats.Connect(a.natsURL, nats.UserCredentials(creds))
	if err != nil {
		t.Fatalf("connect with %s: %v", create[2], err)
	}
	defer nc.Close()
	msg, err := nc.Request(request[2], []byte(request[3]), 30*time.Second)
	if err != nil || msg.Header.Get("Nats-Service-Error-Code") != "" {
		t.Fatalf("nats req %s %s: %v %v %s", request[2], request[3], err, msg.Header, msg.Data)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		req, _ := http.NewRequest(http.MethodGet, a.base+"/v1/chat/demo/messages", nil)
		req.Header.Set("Authorization", "Bearer "+summary.Token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var body bytes.Buffer
		body.ReadFrom(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK && strings.Contains(body.String(), `"role":"assistant"`) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET /v1/chat/demo/messages with the token: %d %s", resp.StatusCode, body.String())
		}
	}
}

// installNotes renders NOTES.txt as helm install prints it (release
// forever in namespace agents, default values), against a fake cluster.
func installNotes(t *testing.T, helm string) string {
	t.Helper()
	cmd := exec.Command(helm, "install", "forever", chartDir, "--namespace", "agents",
		"--dry-run=server", "--disable-openapi-validation")
	cmd.Env = fakeCluster(t, map[string]any{"/api/v1/namespaces/agents": namespaceObject("agents")})
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helm install --dry-run: %v\n%s", err, out)
	}
	_, notes, ok := strings.Cut(string(out), "\nNOTES:\n")
	if !ok {
		t.Fatalf("helm install --dry-run printed no notes:\n%s", out)
	}
	return notes
}
