package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/forever-agents/forever/agentd"
	"github.com/forever-agents/forever/agentd/agentdtest"
)

// testBinaryExternalAuth: a nats-server configured with what agentd auth
// server-config prints trusts agentd's operator, and agentd --auth
// --nats-url creates and serves tenants on it as on its embedded server.
func testBinaryExternalAuth(t *testing.T, bin string) {
	dir := t.TempDir()
	secret := filepath.Join(dir, "secret")
	if err := os.WriteFile(secret, []byte(strings.Repeat("e", 40)), 0o400); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "auth", "server-config", "--auth-secret-file", secret,
		"--jwt-dir", filepath.Join(dir, "jwt")).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "operator:") {
		t.Fatalf("auth server-config: %v %s", err, out)
	}
	natsAddr := agentdtest.FreeAddr(t)
	host, port, _ := strings.Cut(natsAddr, ":")
	conf := filepath.Join(dir, "nats.conf")
	// The store's size is set, as an operator sets it: by default the
	// server takes 3/4 of the disk's free space, and a busy test machine's
	// may be less than the tenant's default quota (1/8 of 10 GiB).
	body := "host: " + host + "\nport: " + port + "\njetstream { store_dir: " + filepath.Join(dir, "js") + ", max_file_store: 4GB }\n" + string(out)
	if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(conf)
	if err != nil {
		t.Fatalf("the printed config: %v\n%s", err, body)
	}
	opts.NoSigs, opts.NoLog = true, true
	srv, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	srv.Start()
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	url := "nats://" + natsAddr
	if nc, err := nats.Connect(url); err == nil {
		nc.Close()
		t.Fatal("the external server accepted a connection without credentials")
	}

	data, httpAddr := filepath.Join(dir, "data"), agentdtest.FreeAddr(t)
	p := startAgentd(t, bin, data, httpAddr, agentdtest.FreeAddr(t), "--auth", "--nats-url", url, "--auth-secret-file", secret, "--local-rate", "-1")
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("agentd's log:\n%s", p.out.String())
		}
	})
	acme := createTenant(t, bin, url, filepath.Join(data, agentd.AdminCredsFile), filepath.Join(dir, "out"), "acme")
	nc, err := nats.Connect(url, nats.UserCredentials(acme.Creds))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if m, err := nc.Request("forever.cmd.bot.chat", []byte(`{"text":"hello external"}`), 30*time.Second); err != nil || m.Header.Get("Nats-Service-Error-Code") != "" {
		t.Fatalf("chat: %v %v", err, m)
	}
	waitAnswered(t, httpAddr, acme.Token, "bot", "hello external")
	if err := nc.Publish("forever.evt.bot", []byte("{}")); err == nil {
		nc.Flush()
	}
	// The account lives on the external server: its streams are there.
	acc, err := srv.LookupAccount(acme.Account)
	if err != nil || !acc.JetStreamEnabled() {
		t.Fatalf("the tenant's account on the external server: %v", err)
	}
}
