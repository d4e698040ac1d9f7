package backup_test

import (
	"bytes"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/forever-agents/forever/agentd/backup"
	"github.com/forever-agents/forever/blob"
	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/eventlog/eventlogtest"
)

// TestBackupRestoreBlobs: the Object Store bucket of payloads stored by
// reference is backed up after the events stream and restored with it,
// into a server where agentd already created the bucket empty.
func TestBackupRestoreBlobs(t *testing.T) {
	ctx := t.Context()
	src, srcSrv := eventlogtest.Open(t, eventlog.Config{})
	fill(t, src, 2)
	nc := eventlogtest.Connect(t, srcSrv)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	bs, err := blob.Open(ctx, js, blob.Config{})
	if err != nil {
		t.Fatal(err)
	}
	payload := bytes.Repeat([]byte("a payload stored by reference "), 40<<10)
	ref, err := bs.Put(ctx, payload)
	if err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	acc, err := backup.BackupAccount(ctx, nc, dir, "agentd", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range acc.Streams {
		names = append(names, s.Name)
	}
	if got, want := names, []string{eventlog.DefaultEventsStream, eventlog.DefaultChunksStream, "OBJ_" + blob.Bucket}; !slices.Equal(got, want) {
		t.Fatalf("streams %v, want %v (the blob bucket after the events)", got, want)
	}
	m := &backup.Manifest{Format: backup.Format, Created: time.Now(), Accounts: []backup.Account{acc}}
	if err := backup.WriteManifest(dir, m); err != nil {
		t.Fatal(err)
	}
	if m, err = backup.ReadManifest(dir); err != nil {
		t.Fatal(err)
	}

	_, dstSrv := eventlogtest.Open(t, eventlog.Config{})
	dnc := eventlogtest.Connect(t, dstSrv)
	djs, err := jetstream.New(dnc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := blob.Open(ctx, djs, blob.Config{}); err != nil {
		t.Fatal(err)
	}
	if err := backup.RestoreAccount(ctx, dnc, dir, m.Accounts[0], 0, nil); err != nil {
		t.Fatal(err)
	}
	restored, err := blob.Bind(ctx, djs, "")
	if err != nil {
		t.Fatal(err)
	}
	got, err := restored.Get(ctx, ref)
	if err != nil {
		t.Fatalf("the payload after restore: %v", err)
	}
	if !bytes.Equal(got, payload) {
		t.Fatal("the restored payload differs")
	}
}
