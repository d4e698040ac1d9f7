package agentd_test

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/forever-agents/forever/agentd"
	"github.com/forever-agents/forever/agentd/agentdtest"
	"github.com/forever-agents/forever/eventlog"
)

// storeHolds reports whether any file under dir contains marker.
func storeHolds(t *testing.T, dir string, marker []byte) bool {
	t.Helper()
	found := false
	err := filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() || found {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		found = bytes.Contains(b, marker)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return found
}

// appendMarker runs a daemon of cfg that appends one event holding marker,
// then stops it.
func appendMarker(t *testing.T, cfg agentd.Config, marker string) {
	t.Helper()
	d, err := agentd.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	d.OnStart(func(ctx context.Context, deps *agentd.Deps) error {
		<-deps.Ownership.Ready()
		_, err := deps.Log.Append(ctx, eventlog.Event{Agent: "a1", Type: "note.added", Data: []byte(`{"text":"` + marker + `"}`)})
		return err
	})
	stop := agentdtest.Start(t, d)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

// TestEncryptionAtRest: with --encryption-key-file no file of the
// JetStream store holds an event's text (without it one does); the store
// opens again with its key and not with another.
func TestEncryptionAtRest(t *testing.T) {
	const marker = "the-secret-plans-of-acme"
	plain := agentdtest.Config(t)
	appendMarker(t, plain, marker)
	if !storeHolds(t, plain.JetStreamDir(), []byte(marker)) {
		t.Fatal("without encryption the store does not hold the event's text: the check proves nothing")
	}

	keyFile := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(keyFile, []byte(strings.Repeat("k", 40)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := agentdtest.Config(t)
	cfg.EncryptionKeyFile = keyFile
	appendMarker(t, cfg, marker)
	if storeHolds(t, cfg.JetStreamDir(), []byte(marker)) {
		t.Fatal("an encrypted store holds the event's text in clear")
	}
	appendMarker(t, cfg, marker+"-again") // opens with its key

	if err := os.WriteFile(keyFile, []byte(strings.Repeat("x", 40)), 0o600); err != nil {
		t.Fatal(err)
	}
	d, err := agentd.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	select {
	case err := <-done:
		if !errors.Is(err, agentd.ErrConfig) || !strings.Contains(err.Error(), "cannot be decrypted") || strings.Contains(err.Error(), "xxxx") {
			t.Fatalf("another key: %v", err)
		}
	case <-d.Started():
		cancel()
		<-done
		t.Fatal("the store opened with another key")
	}
	nokey := cfg
	nokey.EncryptionKeyFile = ""
	d, err = agentd.New(nokey)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Run(t.Context()); !errors.Is(err, agentd.ErrConfig) || !strings.Contains(err.Error(), "cannot be decrypted") {
		t.Fatalf("no key on an encrypted store: %v", err)
	}

	short := agentdtest.Config(t)
	os.WriteFile(keyFile, []byte("short"), 0o600)
	short.EncryptionKeyFile = keyFile
	d, err = agentd.New(short)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Run(t.Context()); !errors.Is(err, agentd.ErrConfig) || !strings.Contains(err.Error(), "encryption-key-file") || strings.Contains(err.Error(), "short") {
		t.Fatalf("a short key: %v", err)
	}
}

// TestEncryptionKeyFileMode: a key file that group or others may read is
// refused at start with a sentence saying how to fix it; at 0600 (and
// 0400) it is taken.
func TestEncryptionKeyFileMode(t *testing.T) {
	keyFile := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(keyFile, []byte(strings.Repeat("k", 40)), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []os.FileMode{0o644, 0o640, 0o604} {
		if err := os.Chmod(keyFile, mode); err != nil {
			t.Fatal(err)
		}
		cfg := agentdtest.Config(t)
		cfg.EncryptionKeyFile = keyFile
		d, err := agentd.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		err = d.Run(t.Context())
		if !errors.Is(err, agentd.ErrConfig) || !strings.Contains(err.Error(), "chmod 600 "+keyFile) || strings.Contains(err.Error(), "kkkk") {
			t.Fatalf("mode %04o: %v, want a config error saying chmod 600 %s", mode, err, keyFile)
		}
	}
	for _, mode := range []os.FileMode{0o600, 0o400} {
		os.Chmod(keyFile, mode)
		if _, err := agentd.ReadEncryptionKey(keyFile); err != nil {
			t.Fatalf("mode %04o: %v", mode, err)
		}
	}
}
