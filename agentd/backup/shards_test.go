package backup_test

import (
	"slices"
	"testing"
	"time"

	"github.com/forever-agents/forever/agentd/backup"
	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/eventlog/eventlogtest"
)

// TestBackupRestoreShards: a sharded log's backup holds every shard
// stream, each kind's in shard order, events before chunks; restored into
// a new server whose agentd made its shard streams, every event of every
// shard comes back at the same sequence.
func TestBackupRestoreShards(t *testing.T) {
	ctx := t.Context()
	cfg := eventlog.Config{Shards: 4, Partitions: 8}
	src, srcSrv := eventlogtest.Open(t, cfg)
	want := fill(t, src, 20)
	shards := map[int]bool{}
	for _, e := range want {
		k, _ := eventlog.ShardOf(e.Seq)
		shards[k] = true
	}
	if len(shards) < 2 {
		t.Fatalf("the events are in shards %v: the test proves little", shards)
	}

	dir := t.TempDir()
	acc, err := backup.BackupAccount(ctx, eventlogtest.Connect(t, srcSrv), dir, "agentd", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range acc.Streams {
		names = append(names, s.Name)
	}
	wantNames := append(src.EventsStreams(), src.ChunksStreams()...)
	if !slices.Equal(names, wantNames) {
		t.Fatalf("streams %v, want %v", names, wantNames)
	}
	m := &backup.Manifest{Format: backup.Format, Created: time.Now(), Partitions: 8, Shards: 4, Accounts: []backup.Account{acc}}
	if err := backup.WriteManifest(dir, m); err != nil {
		t.Fatal(err)
	}
	if m, err = backup.ReadManifest(dir); err != nil || m.Shards != 4 {
		t.Fatalf("manifest %+v, %v", m, err)
	}

	_, dstSrv := eventlogtest.Open(t, cfg)
	if err := backup.RestoreAccount(ctx, eventlogtest.Connect(t, dstSrv), dir, m.Accounts[0], 0, nil); err != nil {
		t.Fatal(err)
	}
	lg := eventlogtest.OpenOn(t, dstSrv, eventlog.Config{Bind: true})
	if lg.Shards() != 4 {
		t.Fatalf("the restored log binds %d shards", lg.Shards())
	}
	got := readAll(t, lg)
	if len(got) != len(want) {
		t.Fatalf("restored %d events, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i].Seq != want[i].Seq || got[i].ID != want[i].ID || string(got[i].Data) != string(want[i].Data) {
			t.Fatalf("event %d: got %+v, want %+v", i, got[i], want[i])
		}
	}
}
