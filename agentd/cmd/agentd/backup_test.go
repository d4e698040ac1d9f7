package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/forever-agents/forever/agentd"
	"github.com/forever-agents/forever/agentd/agentdtest"
	"github.com/forever-agents/forever/agentd/audit"
	"github.com/forever-agents/forever/agentd/backup"
	"github.com/forever-agents/forever/agentd/demo"
	"github.com/forever-agents/forever/agentd/tenancy"
	"github.com/forever-agents/forever/internal/chartargs"
	"github.com/klauspost/compress/s2"
	"github.com/nats-io/nats.go"
)

// runAgentdCLI runs bin with args and returns stdout, failing the test on
// a non-zero exit or a run longer than cliBound (killed).
func runAgentdCLI(t *testing.T, bin string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), cliBound)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = os.Environ()
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("agentd %s: %v\n%s%s", strings.Join(args, " "), err, out.String(), errb.String())
	}
	return out.String()
}

// agentView is what a client reads of an agent: its conversation, its
// running fibers and its schedules.
type agentView struct {
	Messages, Fibers, Schedules string
}

func viewOf(c *crashClient, agent string) agentView {
	v := agentView{
		Fibers:    string(c.command(agent, "fibers", nil)),
		Schedules: string(c.command(agent, "schedules", nil)),
	}
	if !strings.HasPrefix(agent, "steps:") { // steps agents have no conversation
		v.Messages = string(c.command(agent, "messages", nil))
	}
	return v
}

// testBinaryBackupRestore: a backup taken while chats stream and fibers
// step restores into a new node whose log verify finds clean, and whose
// recovery ends every turn and fiber; a backup of the quiet node restores,
// offline into a data dir and online into a running node, to the same
// messages, fibers and schedules for every agent. The live backup is
// signed with an auth secret; the quiet one is sealed with an encryption
// key and holds no chat text in clear (subtests of their own: Sealed,
// Refused).
func testBinaryBackupRestore(t *testing.T, bin string) {
	tmp := t.TempDir()
	secret := writeKeyFile(t, filepath.Join(tmp, "secret"), "s")
	key := writeKeyFile(t, filepath.Join(tmp, "key"), "k")
	httpA, natsA := agentdtest.FreeAddr(t), agentdtest.FreeAddr(t)
	startAgentd(t, bin, filepath.Join(tmp, "a"), httpA, natsA, "--local-rate", "300")
	urlA := "nats://" + natsA
	c := dialAgentd(t, natsA)

	chats := []string{"bk0", "bk1", "bk2"}
	steps := []string{"steps:bk0", "steps:bk1"}
	agents := append(append([]string{}, chats...), steps...)
	for _, s := range steps {
		c.command(s, "start", demo.StepsStart{Steps: 40, DelayMS: 25})
	}
	var wg sync.WaitGroup
	for _, a := range chats {
		wg.Go(func() {
			for i := range 3 {
				cmd := exec.Command(bin, "chat", a, fmt.Sprintf("Tell me a story, number %d", i), "--nats-url", urlA)
				if out, err := cmd.CombinedOutput(); err != nil {
					t.Errorf("chat %s: %v\n%s", a, err, out)
					return
				}
			}
		})
	}
	// The live backup, while turns stream and fibers step.
	time.Sleep(700 * time.Millisecond) // not a synchronisation: the point, a live backup taken while the turns stream
	live := filepath.Join(tmp, "live")
	runAgentdCLI(t, bin, "backup", "--out", live, "--nats-url", urlA, "--auth-secret-file", secret)
	wg.Wait()
	waitFibersDone(t, c, agents)

	// The live backup: every turn and fiber in flight is recovered to its
	// end on the new node, and the log is clean.
	dirL := filepath.Join(tmp, "l")
	runAgentdCLI(t, bin, "restore", "--from", live, "--data", dirL, "--auth-secret-file", secret)
	httpL, natsL := agentdtest.FreeAddr(t), agentdtest.FreeAddr(t)
	pl := startAgentd(t, bin, dirL, httpL, natsL, "--local-rate", "-1")
	cl := dialAgentd(t, natsL)
	waitFibersDone(t, cl, agents)
	// The backup caught work in flight, which the new node recovered.
	recovered := 0
	for _, a := range agents {
		for _, e := range cl.events(a) {
			if e.Type == "fiber.recovered" {
				recovered++
			}
		}
	}
	if recovered == 0 {
		t.Error("the live backup held no fiber in flight: nothing was recovered")
	}
	if out := runAgentdCLI(t, bin, "verify", "--nats-url", "nats://"+natsL); !strings.HasPrefix(lastLine(out), "ok:") {
		t.Errorf("verify after restoring the live backup:\n%s", out)
	}
	pl.kill()

	// A chat with words found nowhere else, for the sealed backup to hide.
	said := "the vault opens with " + rand.Text()
	runAgentdCLI(t, bin, "chat", "bk0", said, "--nats-url", urlA)

	// The quiet backup restores to the same views, offline and online.
	want := map[string]agentView{}
	for _, a := range agents {
		want[a] = viewOf(c, a)
	}
	quiet := filepath.Join(tmp, "quiet")
	runAgentdCLI(t, bin, "backup", "--out", quiet, "--nats-url", urlA, "--encryption-key-file", key)
	plain := filepath.Join(tmp, "plain")
	runAgentdCLI(t, bin, "backup", "--out", plain, "--nats-url", urlA)
	t.Run("Sealed", func(t *testing.T) {
		// The user's words of a chat: the plain backup holds them, the
		// sealed one does not.
		if !dirHolds(t, plain, said) {
			t.Fatalf("the plain backup does not hold %q: the check proves nothing", said)
		}
		if dirHolds(t, quiet, said) {
			t.Errorf("the sealed backup holds %q in clear", said)
		}
	})
	check := func(name string, c *crashClient) {
		t.Helper()
		for _, a := range agents {
			if got := viewOf(c, a); got != want[a] {
				t.Errorf("%s: %s restored as\n%+v\nwant\n%+v", name, a, got, want[a])
			}
		}
	}
	dirQ := filepath.Join(tmp, "q")
	runAgentdCLI(t, bin, "restore", "--from", quiet, "--data", dirQ, "--encryption-key-file", key)
	httpQ, natsQ := agentdtest.FreeAddr(t), agentdtest.FreeAddr(t)
	pq := startAgentd(t, bin, dirQ, httpQ, natsQ)
	check("offline", dialAgentd(t, natsQ))
	if out := runAgentdCLI(t, bin, "verify", "--nats-url", "nats://"+natsQ); !strings.HasPrefix(lastLine(out), "ok:") {
		t.Errorf("verify after the offline restore:\n%s", out)
	}
	pq.kill()

	dirR := filepath.Join(tmp, "r")
	httpR, natsR := agentdtest.FreeAddr(t), agentdtest.FreeAddr(t)
	pr := startAgentd(t, bin, dirR, httpR, natsR)
	t.Run("Refused", func(t *testing.T) {
		testRestoreRefused(t, bin, "nats://"+natsR, live, plain, quiet, secret, key)
	})
	var sum struct {
		Done     string
		Accounts []struct {
			Streams []struct {
				Name          string
				Bytes         uint64
				SnapshotBytes int64
			}
		}
	}
	out := runAgentdCLI(t, bin, "restore", "--from", quiet, "--nats-url", "nats://"+natsR, "--encryption-key-file", key)
	if err := json.Unmarshal([]byte(out), &sum); err != nil || sum.Done != "restore" || len(sum.Accounts) != 1 || len(sum.Accounts[0].Streams) < 2 {
		t.Fatalf("restore printed %q (%v)", out, err)
	}
	// bytes is the stream's, as its state says, not the snapshot file's.
	if m, err := backup.ReadManifest(quiet); err != nil {
		t.Errorf("read the manifest of %s: %v", quiet, err)
	} else {
		for i, s := range sum.Accounts[0].Streams {
			ms := m.Accounts[0].Streams[i]
			if s.Name != ms.Name || s.Bytes != ms.Bytes() || s.SnapshotBytes != ms.Size {
				t.Errorf("restore summary stream %+v, want bytes %d and snapshotBytes %d of %s", s, ms.Bytes(), ms.Size, ms.Name)
			}
		}
	}
	// A second restore finds the target full and changes nothing.
	cmd := exec.Command(bin, "restore", "--from", quiet, "--nats-url", "nats://"+natsR, "--encryption-key-file", key)
	if b, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(b), "not empty") {
		t.Errorf("a restore into a full node: %v %s", err, b)
	}
	check("online", dialAgentd(t, natsR))
	pr.kill()
}

// testRestoreRefused: into the empty running node at url, each broken
// restore is refused before anything is restored: a tampered manifest, a
// snapshot swapped for another node's with the manifest's checksums
// recomputed, a truncated file, an unsigned backup without
// --allow-unsigned, a sealed one with another key or none. After them the
// node is still empty, so the caller's good restore succeeds.
func testRestoreRefused(t *testing.T, bin, url, signed, plain, sealed, secret, key string) {
	tmp := t.TempDir()
	other := writeKeyFile(t, filepath.Join(tmp, "other"), "o")
	open := writeKeyFile(t, filepath.Join(tmp, "open"), "p")
	os.Chmod(open, 0o644)

	tampered := copyDir(t, sealed, filepath.Join(tmp, "tampered"))
	editManifestJSON(t, tampered, func(m map[string]any) { m["partitions"] = m["partitions"].(float64) + 1 })

	// The attack: an older snapshot (here the plain backup's) in
	// place of the signed backup's events, its size and checksum written
	// into the manifest.
	swapped := copyDir(t, signed, filepath.Join(tmp, "swapped"))
	editManifestJSON(t, swapped, func(m map[string]any) {
		st := m["accounts"].([]any)[0].(map[string]any)["streams"].([]any)[0].(map[string]any)
		b, err := os.ReadFile(filepath.Join(plain, st["file"].(string)))
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(swapped, st["file"].(string)), b, 0o600)
		sum := sha256.Sum256(b)
		st["size"], st["sha256"] = len(b), hex.EncodeToString(sum[:])
	})

	truncated := copyDir(t, sealed, filepath.Join(tmp, "truncated"))
	chunks := filepath.Join(truncated, "agentd", "FOREVER_CHUNKS.snap")
	b, err := os.ReadFile(chunks)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(chunks, b[:len(b)/2], 0o600)

	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"TamperedManifest", []string{"--from", tampered, "--encryption-key-file", key}, "signature does not match"},
		{"SwappedSnapshot", []string{"--from", swapped, "--auth-secret-file", secret}, "signature does not match"},
		{"TruncatedFile", []string{"--from", truncated, "--encryption-key-file", key}, "nothing was restored"},
		{"Unsigned", []string{"--from", plain}, "--allow-unsigned"},
		{"WrongKey", []string{"--from", sealed, "--encryption-key-file", other}, "not the one the backup was made with"},
		{"NoKey", []string{"--from", sealed}, "--encryption-key-file"},
		{"KeyFileMode", []string{"--from", sealed, "--encryption-key-file", open}, "chmod 600 " + open},
	} {
		cmd := exec.Command(bin, append([]string{"restore", "--nats-url", url}, tc.args...)...)
		if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), tc.want) {
			t.Errorf("%s: %v %s, want a refusal saying %q", tc.name, err, out, tc.want)
		}
	}
}

// writeKeyFile writes a 48-byte key of c at path, mode 0600.
func writeKeyFile(t *testing.T, path, c string) string {
	t.Helper()
	if err := os.WriteFile(path, []byte(strings.Repeat(c, 48)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// dirHolds reports whether a file under dir holds text, as it is or
// decompressed: a plain snapshot is the server's s2-compressed archive.
func dirHolds(t *testing.T, dir, text string) bool {
	t.Helper()
	found := false
	err := filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() || found {
			return err
		}
		b, err := os.ReadFile(p)
		// What decompresses before an error, if anything (a sealed file
		// is no s2 stream).
		clear, _ := io.ReadAll(s2.NewReader(bytes.NewReader(b)))
		found = bytes.Contains(b, []byte(text)) || bytes.Contains(clear, []byte(text))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return found
}

// copyDir copies the backup src to dst.
func copyDir(t *testing.T, src, dst string) string {
	t.Helper()
	if err := os.CopyFS(dst, os.DirFS(src)); err != nil {
		t.Fatal(err)
	}
	return dst
}

// editManifestJSON rewrites dir's manifest through edit, its signature
// kept: what someone without the key can do.
func editManifestJSON(t *testing.T, dir string, edit func(map[string]any)) {
	t.Helper()
	p := filepath.Join(dir, "manifest.json")
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	edit(m)
	if b, err = json.Marshal(m); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// waitStatusTurnEnded waits until the agent's status shows an ended last turn
// and no active one (GET /v1/agents/{id}/status with the tenant's token).
func waitStatusTurnEnded(t *testing.T, httpAddr, token, agent string) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) { // not a synchronisation: the interval of a poll on the agent's status showing its turn ended
		code, body := authedGet(t, "http://"+httpAddr+"/v1/agents/"+agent+"/status", token)
		if code == 200 && !strings.Contains(body, `"activeTurn"`) && strings.Contains(body, `"endedAt"`) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s's turn did not end: %d %.400s", agent, code, body)
		}
	}
}

// testClusterBackup: a 3-node cluster with auth and two tenants is backed
// up with the admin credential, signed with the cluster's auth secret, and
// restored, with another node's admin credential, into a new cluster that
// shares its auth secret, after a restore that failed half-way was undone: every
// tenant's conversations are back, its token still works there, and the
// logs of agentd and of every tenant verify clean.
func testClusterBackup(t *testing.T, bin string) {
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte(strings.Repeat("s", 48)), 0o400); err != nil {
		t.Fatal(err)
	}
	// Two shards, not the default 8: the backup and the restore copy every
	// stream of every account (the tenants' logs are sharded too), R3, on
	// two clusters; 2 keep the sharded layout under test and take about
	// a minute off TestCluster, on the package's critical path.
	withSecret := func(p *chartargs.Pod) { p.AuthSecretFile = secret; p.Shards = 2 }
	src := newCluster(t, 3, withSecret)
	for _, nd := range src {
		nd.start(t, bin)
	}
	waitReady(t, src...)
	out := t.TempDir()
	admin := filepath.Join(src[0].data, agentd.AdminCredsFile)
	tenants := []tenantCred{
		createTenant(t, bin, "nats://"+src[0].nats, admin, out, "acme"),
		createTenant(t, bin, "nats://"+src[0].nats, admin, out, "zeta"),
	}
	agents := []string{"bot0", "bot1", "bot2"}
	want := map[string]string{}
	for _, tc := range tenants {
		for _, a := range agents {
			tenantChat(t, src[1].nats, tc, a, "hello from "+tc.Tenant)
			// The whole answer: the messages view shows a streaming one.
			waitStatusTurnEnded(t, src[2].http, tc.Token, a)
			want[tc.Tenant+"/"+a] = waitAnswered(t, src[2].http, tc.Token, a, "hello from "+tc.Tenant)
		}
	}
	dir := filepath.Join(t.TempDir(), "backup")
	runAgentdCLI(t, bin, "backup", "--out", dir, "--nats-url", "nats://"+src[0].nats, "--creds", admin, "--auth-secret-file", secret)

	dst := newCluster(t, 3, withSecret)
	for _, nd := range dst {
		nd.start(t, bin)
	}
	waitReady(t, dst...)
	// The admin credential minted from the shared secret, as an operator
	// gets it out of a pod without a shell.
	dstAdmin := filepath.Join(t.TempDir(), "admin.creds")
	if err := os.WriteFile(dstAdmin, []byte(runAgentdCLI(t, bin, "auth", "admin-creds", "--auth-secret-file", secret)), 0o600); err != nil {
		t.Fatal(err)
	}
	// A restore that fails at the last tenant's last stream (a config the
	// server refuses, in a manifest signed with the secret) is undone
	// whole, agentd's account and the tenants before it: the good restore
	// after it finds the new cluster empty.
	broken := copyDir(t, dir, filepath.Join(t.TempDir(), "broken"))
	m, err := backup.ReadManifest(broken)
	if err != nil {
		t.Fatal(err)
	}
	last := m.Accounts[len(m.Accounts)-1].Streams
	last[len(last)-1].Config = json.RawMessage(`{"name":"` + last[len(last)-1].Name + `","subjects":"not a list"}`)
	m.Seal(backup.NewKeys([]byte(strings.Repeat("s", 48)), nil))
	os.Remove(filepath.Join(broken, backup.ManifestFile))
	if err := backup.WriteManifest(broken, m); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "restore", "--from", broken, "--nats-url", "nats://"+dst[1].nats, "--creds", dstAdmin, "--auth-secret-file", secret)
	if b, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(b), "tenant "+m.Accounts[len(m.Accounts)-1].Tenant+": ") ||
		!strings.Contains(string(b), "the restore was undone") {
		t.Fatalf("a restore failing at its last tenant: %v %s", err, b)
	}
	runAgentdCLI(t, bin, "restore", "--from", dir, "--nats-url", "nats://"+dst[1].nats, "--creds", dstAdmin, "--auth-secret-file", secret)
	for _, tc := range tenants {
		for _, a := range agents {
			// A node whose server missed a restored account's update
			// (the undone restore removed it a moment before) learns it
			// at the resolver's next sync, within a minute.
			got := waitAnsweredWithin(t, 90*time.Second, dst[0].http, tc.Token, a, "hello from "+tc.Tenant)
			if got != want[tc.Tenant+"/"+a] {
				t.Errorf("%s/%s restored as\n%s\nwant\n%s", tc.Tenant, a, got, want[tc.Tenant+"/"+a])
			}
		}
	}
	// Both restores are audited as the admin, in each tenant's records.
	// The node asked reaches a restored tenant's audit stream once its
	// watch of the tenants bucket has caught up: until then audit tail
	// fails ("no responders"), and is asked again.
	for _, tc := range tenants {
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) { // not a synchronisation: the interval of a poll on each tenant's audit tail answering
			cmd := exec.Command(bin, "audit", "tail", "-n", "0", "--tenant", tc.Tenant, "--nats-url", "nats://"+dst[0].nats, "--creds", dstAdmin)
			cmd.Env = os.Environ()
			o, err := cmd.CombinedOutput()
			out := string(o)
			var failed, ok bool
			for line := range strings.Lines(out) {
				var r audit.Record
				if json.Unmarshal([]byte(line), &r) == nil && r.Action == "restore" && r.Cred == tenancy.AdminCred {
					failed = failed || r.Outcome == audit.Failed
					ok = ok || r.Outcome == audit.OK
				}
			}
			if failed && ok {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("tenant %s's audit lacks the failed and the good restore (%v):\n%s", tc.Tenant, err, out)
			}
		}
	}
	// The node asked learns the restored tenants from its watch of the
	// tenants bucket, which may lag the chats answered on another node.
	var rep string
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(500 * time.Millisecond) { // not a synchronisation: the interval of a poll on verify naming both tenants
		rep = runAgentdCLI(t, bin, "verify", "--nats-url", "nats://"+dst[2].nats, "--creds", filepath.Join(dst[2].data, agentd.AdminCredsFile))
		if strings.Contains(rep, "tenant acme:") && strings.Contains(rep, "tenant zeta:") || time.Now().After(deadline) {
			break
		}
	}
	for _, name := range []string{"agentd:", "tenant acme:", "tenant zeta:"} {
		if !strings.Contains(rep, name) {
			t.Errorf("verify did not check %s\n%s", name, rep)
		}
	}
	oks := 0
	for line := range strings.Lines(rep) {
		if strings.HasPrefix(line, "ok:") {
			oks++
		}
	}
	if oks != 3 {
		t.Errorf("verify after the restore:\n%s", rep)
	}
}

// tenantChat sends a chat to agent as tenant tc over NATS, retrying while
// the tenant's partitions settle (503).
func tenantChat(t *testing.T, natsAddr string, tc tenantCred, agent, text string) {
	t.Helper()
	nc, err := nats.Connect("nats://"+natsAddr, nats.UserCredentials(tc.Creds))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	body, _ := json.Marshal(map[string]string{"text": text})
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) { // not a synchronisation: the interval of a poll on a chat being answered
		msg, err := nc.Request("forever.cmd."+agent+".chat", body, 30*time.Second)
		if err == nil && msg.Header.Get("Nats-Service-Error-Code") == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("chat %s as %s: %v %v", agent, tc.Tenant, err, msg)
		}
	}
}
