package backup_test

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/forever-agents/forever/agentd/backup"
	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/eventlog/eventlogtest"
)

// TestRestoreKeepsTargetAudit: a restore into a target whose audit log
// already holds records (an admin credential minted against it, a
// restore that failed) keeps them instead of refusing the target, and
// undoing a restore leaves the audit log in place.
func TestRestoreKeepsTargetAudit(t *testing.T) {
	ctx := t.Context()
	auditCfg := jetstream.StreamConfig{Name: "FOREVER_AUDIT", Subjects: []string{"forever.audit.>"}}
	src, srcSrv := eventlogtest.Open(t, eventlog.Config{})
	fill(t, src, 3)
	sjs, _ := jetstream.New(eventlogtest.Connect(t, srcSrv))
	if _, err := sjs.CreateStream(ctx, auditCfg); err != nil {
		t.Fatal(err)
	}
	if _, err := sjs.Publish(ctx, "forever.audit._node", []byte(`{"action":"tenant.create"}`)); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	acc, err := backup.BackupAccount(ctx, eventlogtest.Connect(t, srcSrv), dir, "agentd", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := backup.WriteManifest(dir, &backup.Manifest{Format: backup.Format, Created: time.Now(), Accounts: []backup.Account{acc}}); err != nil {
		t.Fatal(err)
	}

	_, dstSrv := eventlogtest.Open(t, eventlog.Config{})
	dnc := eventlogtest.Connect(t, dstSrv)
	djs, _ := jetstream.New(dnc)
	if _, err := djs.CreateStream(ctx, auditCfg); err != nil {
		t.Fatal(err)
	}
	if _, err := djs.Publish(ctx, "forever.audit._node", []byte(`{"action":"admin.creds"}`)); err != nil {
		t.Fatal(err)
	}
	if err := backup.RestoreAccount(ctx, dnc, dir, acc, 0, nil); err != nil {
		t.Fatalf("restore into a target whose audit log holds a record: %v", err)
	}
	msgs := func() uint64 {
		t.Helper()
		st, err := djs.Stream(ctx, "FOREVER_AUDIT")
		if err != nil {
			t.Fatal(err)
		}
		return st.CachedInfo().State.Msgs
	}
	if got := msgs(); got != 1 {
		t.Fatalf("the target's audit log holds %d records after the restore, want its own 1", got)
	}
	if err := backup.UndoAccount(ctx, dnc, acc); err != nil {
		t.Fatal(err)
	}
	if got := msgs(); got != 1 {
		t.Fatalf("the target's audit log holds %d records after the undo, want 1", got)
	}
}
