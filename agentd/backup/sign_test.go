package backup_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/forever-agents/forever/agentd/backup"
	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/eventlog/eventlogtest"
)

var (
	secret = []byte(strings.Repeat("s", 48))
	encKey = []byte(strings.Repeat("k", 40))
)

// writeBackup writes a backup of two snapshot files by hand, its manifest
// sealed with keys, and returns its dir.
func writeBackup(t *testing.T, keys backup.Keys, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	acc := backup.Account{Streams: []backup.Stream{}}
	for _, name := range []string{"FOREVER_EVENTS", "FOREVER_CHUNKS"} {
		rel := filepath.Join("agentd", name+".snap")
		acc.Streams = append(acc.Streams, writeSnap(t, dir, rel, name, files[name]))
	}
	m := &backup.Manifest{Format: backup.Format, Created: time.Unix(1, 0).UTC(), Partitions: 8, Accounts: []backup.Account{acc}}
	m.Seal(keys)
	if err := backup.WriteManifest(dir, m); err != nil {
		t.Fatal(err)
	}
	return dir
}

func writeSnap(t *testing.T, dir, rel, name, data string) backup.Stream {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, rel)), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, rel), []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte(data))
	return backup.Stream{Name: name, File: rel, Size: int64(len(data)), SHA256: hex.EncodeToString(sum[:]),
		Config: json.RawMessage(`{"name":"` + name + `"}`), State: json.RawMessage(`{"messages":1}`)}
}

// editManifest rewrites dir's manifest through edit, keeping its
// signature: what an attacker without the key can do.
func editManifest(t *testing.T, dir string, edit func(m *backup.Manifest)) {
	t.Helper()
	m, err := backup.ReadManifest(dir)
	if err != nil {
		t.Fatal(err)
	}
	edit(m)
	os.Remove(filepath.Join(dir, backup.ManifestFile))
	if err := backup.WriteManifest(dir, m); err != nil {
		t.Fatal(err)
	}
}

// check is what a restore does before anything is restored: read the
// manifest, verify it with keys, check every file.
func check(dir string, keys backup.Keys, allowUnsigned bool) error {
	m, err := backup.ReadManifest(dir)
	if err != nil {
		return err
	}
	if err := m.Verify(keys, allowUnsigned); err != nil {
		return err
	}
	return backup.CheckFiles(dir, m, keys.Seal)
}

// TestManifestSignature: a signed backup passes the check with the key it
// was made with; a tampered manifest, a swapped snapshot with the
// manifest's checksums recomputed, a truncated file, another key, no key,
// and a stripped signature are each refused by the check that runs before
// anything is restored.
func TestManifestSignature(t *testing.T) {
	keys := backup.NewKeys(secret, nil)
	files := map[string]string{"FOREVER_EVENTS": "events of the registry v2", "FOREVER_CHUNKS": "chunks"}
	if err := check(writeBackup(t, keys, files), keys, false); err != nil {
		t.Fatalf("a good signed backup: %v", err)
	}
	for _, tc := range []struct {
		name    string
		change  func(t *testing.T, dir string)
		keys    backup.Keys
		allow   bool
		wantErr error // nil: any error
	}{
		{name: "tampered manifest", keys: keys, wantErr: backup.ErrSignature, change: func(t *testing.T, dir string) {
			editManifest(t, dir, func(m *backup.Manifest) { m.Partitions = 16 })
		}},
		{name: "swapped snapshot with recomputed checksums", keys: keys, wantErr: backup.ErrSignature, change: func(t *testing.T, dir string) {
			st := writeSnap(t, dir, filepath.Join("agentd", "FOREVER_EVENTS.snap"), "FOREVER_EVENTS", "events of the registry v1")
			editManifest(t, dir, func(m *backup.Manifest) { m.Accounts[0].Streams[0] = st })
		}},
		{name: "truncated file", keys: keys, change: func(t *testing.T, dir string) {
			p := filepath.Join(dir, "agentd", "FOREVER_CHUNKS.snap")
			os.WriteFile(p, []byte("chu"), 0o600)
		}},
		{name: "another secret", keys: backup.NewKeys([]byte(strings.Repeat("x", 48)), nil), wantErr: backup.ErrSignature},
		{name: "no key", keys: backup.Keys{}, wantErr: backup.ErrNoKey},
		{name: "no key, even allowing unsigned", keys: backup.Keys{}, allow: true, wantErr: backup.ErrNoKey},
		{name: "signature stripped", keys: keys, wantErr: backup.ErrUnsigned, change: func(t *testing.T, dir string) {
			editManifest(t, dir, func(m *backup.Manifest) { m.Signature = nil })
		}},
		{name: "path out of the backup", keys: keys, change: func(t *testing.T, dir string) {
			editManifest(t, dir, func(m *backup.Manifest) { m.Accounts[0].Streams[0].File = "../../etc/passwd" })
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := writeBackup(t, keys, files)
			if tc.change != nil {
				tc.change(t, dir)
			}
			err := check(dir, tc.keys, tc.allow)
			if err == nil || tc.wantErr != nil && !errors.Is(err, tc.wantErr) {
				t.Fatalf("check: %v, want %v", err, tc.wantErr)
			}
		})
	}

	// Unsigned: refused without --allow-unsigned, checked by checksums
	// with it (damage is still found).
	dir := writeBackup(t, backup.Keys{}, files)
	if err := check(dir, backup.Keys{}, false); !errors.Is(err, backup.ErrUnsigned) {
		t.Fatalf("an unsigned backup: %v, want ErrUnsigned", err)
	}
	if err := check(dir, backup.Keys{}, true); err != nil {
		t.Fatalf("an unsigned backup with allowUnsigned: %v", err)
	}
	os.WriteFile(filepath.Join(dir, "agentd", "FOREVER_CHUNKS.snap"), []byte("chunkz"), 0o600)
	if err := check(dir, backup.Keys{}, true); err == nil {
		t.Fatal("a damaged unsigned backup passed the check")
	}
}

// TestSealedBackup: with an encryption key, no file of the backup holds
// an event's text, the manifest is signed with a key derived from it, and
// the backup restores with the key, every event back; another key or
// none is refused before anything is restored.
func TestSealedBackup(t *testing.T) {
	const marker = "the-secret-plans-of-acme"
	ctx := t.Context()
	src, srcSrv := eventlogtest.Open(t, eventlog.Config{})
	if _, err := src.Append(ctx, eventlog.Event{Agent: "a", Type: "note", Data: json.RawMessage(`{"text":"` + marker + `"}`)}); err != nil {
		t.Fatal(err)
	}
	want := fill(t, src, 5)
	keys := backup.NewKeys(nil, encKey)
	dir := t.TempDir()
	acc, err := backup.BackupAccount(ctx, eventlogtest.Connect(t, srcSrv), dir, "agentd", "", keys.Seal)
	if err != nil {
		t.Fatal(err)
	}
	m := &backup.Manifest{Format: backup.Format, Created: time.Now(), Accounts: []backup.Account{acc}}
	m.Seal(keys)
	if err := backup.WriteManifest(dir, m); err != nil {
		t.Fatal(err)
	}
	filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err == nil && !e.IsDir() {
			if b, _ := os.ReadFile(p); bytes.Contains(b, []byte(marker)) {
				t.Errorf("%s holds the event's text in clear", p)
			}
		}
		return err
	})
	if m.Signature == nil || m.Signature.Key != backup.SignedByEncryptionKey {
		t.Fatalf("signature %+v, want one by the encryption key", m.Signature)
	}
	for _, tc := range []struct {
		name    string
		keys    backup.Keys
		wantErr error
	}{
		{"no key", backup.Keys{}, backup.ErrNoKey},
		{"another key", backup.NewKeys(nil, []byte(strings.Repeat("o", 40))), backup.ErrSignature},
		{"the auth secret only", backup.NewKeys(secret, nil), backup.ErrNoKey},
	} {
		if err := check(dir, tc.keys, true); !errors.Is(err, tc.wantErr) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.wantErr)
		}
	}
	if err := check(dir, keys, false); err != nil {
		t.Fatal(err)
	}
	// A restore given the auth secret too checks with the encryption key,
	// which signed.
	if err := check(dir, backup.NewKeys(secret, encKey), false); err != nil {
		t.Fatalf("with both keys: %v", err)
	}
	m, _ = backup.ReadManifest(dir)
	_, dstSrv := eventlogtest.Open(t, eventlog.Config{})
	if err := backup.RestoreAccount(ctx, eventlogtest.Connect(t, dstSrv), dir, m.Accounts[0], 0, keys.Seal); err != nil {
		t.Fatal(err)
	}
	lg := eventlogtest.OpenOn(t, dstSrv, eventlog.Config{Bind: true})
	if got := readAll(t, lg); len(got) != len(want) {
		t.Fatalf("restored %d events, want %d", len(got), len(want))
	}
	evs, err := lg.Read(ctx, eventlog.Filter{Agent: "a"}, 0, 1)
	if err != nil || len(evs) != 1 || !strings.Contains(string(evs[0].Data), marker) {
		t.Fatalf("the first event restored as %v (%v)", evs, err)
	}
}

// TestRestoreUndo: a restore that fails at its second stream deletes the
// first again, so the target is empty and a retry restores.
func TestRestoreUndo(t *testing.T) {
	ctx := t.Context()
	src, srcSrv := eventlogtest.Open(t, eventlog.Config{})
	want := fill(t, src, 5)
	dir := t.TempDir()
	acc, err := backup.BackupAccount(ctx, eventlogtest.Connect(t, srcSrv), dir, "agentd", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	_, dstSrv := eventlogtest.Open(t, eventlog.Config{})
	dnc := eventlogtest.Connect(t, dstSrv)
	broken := acc
	broken.Streams = append([]backup.Stream{}, acc.Streams...)
	broken.Streams[1].Config = json.RawMessage(`{"name":"FOREVER_CHUNKS","subjects":"not a list"}`)
	if err := backup.RestoreAccount(ctx, dnc, dir, broken, 0, nil); err == nil {
		t.Fatal("a stream with a bad config was restored")
	}
	if err := backup.RestoreAccount(ctx, dnc, dir, acc, 0, nil); err != nil {
		t.Fatalf("the retry after a failed restore: %v", err)
	}
	// An account restored before another failed is undone whole.
	if err := backup.UndoAccount(ctx, dnc, acc); err != nil {
		t.Fatal(err)
	}
	if err := backup.RestoreAccount(ctx, dnc, dir, acc, 0, nil); err != nil {
		t.Fatalf("the retry after an undone restore: %v", err)
	}
	lg := eventlogtest.OpenOn(t, dstSrv, eventlog.Config{Bind: true})
	if got := readAll(t, lg); len(got) != len(want) {
		t.Fatalf("restored %d events, want %d", len(got), len(want))
	}
}

// FuzzParseManifest: any bytes parse to a manifest or an error, never a
// panic; a manifest that parses has only local file paths and Forever
// stream names, verifies after Seal with a key and not after a change.
func FuzzParseManifest(f *testing.F) {
	keys := backup.NewKeys(secret, encKey)
	good, _ := json.Marshal(&backup.Manifest{Format: backup.Format, Partitions: 4, Accounts: []backup.Account{
		{Streams: []backup.Stream{{Name: "FOREVER_EVENTS", File: "agentd/FOREVER_EVENTS.snap", Size: 3,
			SHA256: strings.Repeat("ab", 32), Config: json.RawMessage(`{}`), State: json.RawMessage(`{}`)}},
			Epochs: map[string]uint64{"0": 3}},
		{Tenant: "acme", Streams: []backup.Stream{}},
	}})
	f.Add(good)
	f.Add([]byte(`{"format":1,"accounts":[{"streams":[{"name":"FOREVER_X","file":"../x","sha256":""}]}]}`))
	f.Add([]byte(`{"format":1,"accounts":[{"tenant":"a.b"}],"signature":{"alg":"HMAC-SHA256","key":"auth-secret-file","mac":"00"}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := backup.ParseManifest(b)
		if err != nil {
			return
		}
		for _, a := range m.Accounts {
			for _, s := range a.Streams {
				if !filepath.IsLocal(s.File) || strings.ContainsAny(s.Name, ".*> ") {
					t.Fatalf("parsed a stream %q at %q", s.Name, s.File)
				}
			}
		}
		_ = m.Verify(keys, false)
		m.Seal(keys)
		if err := m.Verify(keys, false); err != nil {
			t.Fatalf("a manifest sealed with keys does not verify: %v", err)
		}
		m.Partitions++
		if err := m.Verify(keys, false); !errors.Is(err, backup.ErrSignature) {
			t.Fatalf("a changed manifest verified: %v", err)
		}
	})
}
