package backup_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/forever-agents/forever/agentd/backup"
	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/eventlog/eventlogtest"
)

// fill appends n events of each of a few agents and a chunk stream each,
// and returns every event as read back.
func fill(t *testing.T, lg *eventlog.Log, n int) []eventlog.Event {
	t.Helper()
	ctx := t.Context()
	for i := range n {
		for _, agent := range []string{"a", "b", "steps:c"} {
			if _, err := lg.Append(ctx, eventlog.Event{Agent: agent, Type: "note", ID: fmt.Sprintf("%s-%d", agent, i),
				Time: time.Unix(int64(i), 0).UTC(), Data: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i))}); err != nil {
				t.Fatal(err)
			}
			if _, err := lg.Append(ctx, eventlog.Event{Agent: agent, Stream: "s1", Type: "chunk", ID: fmt.Sprintf("s1/%s/%d", agent, i),
				Time: time.Unix(int64(i), 0).UTC(), Data: json.RawMessage(`{"type":"text-delta","delta":"x"}`)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	return readAll(t, lg)
}

func readAll(t *testing.T, lg *eventlog.Log) []eventlog.Event {
	t.Helper()
	var all []eventlog.Event
	for _, f := range []eventlog.Filter{{Agent: "a"}, {Agent: "b"}, {Agent: "steps:c"},
		{Agent: "a", Stream: "s1"}, {Agent: "b", Stream: "s1"}, {Agent: "steps:c", Stream: "s1"}} {
		evs, err := lg.Read(t.Context(), f, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, evs...)
	}
	return all
}

// TestBackupRestore: every event of both streams comes back, in order and
// at the same sequences, in a new server; the restore refuses a target
// that holds messages and a damaged snapshot, and changes nothing then.
func TestBackupRestore(t *testing.T) {
	ctx := t.Context()
	src, srcSrv := eventlogtest.Open(t, eventlog.Config{})
	want := fill(t, src, 50)

	dir := t.TempDir()
	nc := eventlogtest.Connect(t, srcSrv)
	acc, err := backup.BackupAccount(ctx, nc, dir, "agentd", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range acc.Streams {
		names = append(names, s.Name)
		if s.Messages() == 0 || s.Size == 0 {
			t.Errorf("%s: %d messages, %d bytes", s.Name, s.Messages(), s.Size)
		}
	}
	if got, want := names, []string{eventlog.DefaultEventsStream, eventlog.DefaultChunksStream}; !slices.Equal(got, want) {
		t.Fatalf("streams %v, want %v (events before chunks)", got, want)
	}
	m := &backup.Manifest{Format: backup.Format, Created: time.Now(), Accounts: []backup.Account{acc}}
	if err := backup.WriteManifest(dir, m); err != nil {
		t.Fatal(err)
	}
	m, err = backup.ReadManifest(dir)
	if err != nil {
		t.Fatal(err)
	}

	// Into a new server that agentd already started on: its streams exist
	// and are empty.
	_, dstSrv := eventlogtest.Open(t, eventlog.Config{})
	dnc := eventlogtest.Connect(t, dstSrv)
	if err := backup.RestoreAccount(ctx, dnc, dir, m.Accounts[0], 0, nil); err != nil {
		t.Fatal(err)
	}
	lg := eventlogtest.OpenOn(t, dstSrv, eventlog.Config{Bind: true})
	got := readAll(t, lg)
	if len(got) != len(want) {
		t.Fatalf("restored %d events, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i].Seq != want[i].Seq || got[i].ID != want[i].ID || string(got[i].Data) != string(want[i].Data) {
			t.Fatalf("event %d: got %+v, want %+v", i, got[i], want[i])
		}
	}

	// A second restore into the now full target is refused, naming it.
	err = backup.RestoreAccount(ctx, dnc, dir, m.Accounts[0], 0, nil)
	if !errors.Is(err, backup.ErrNotEmpty) {
		t.Fatalf("restore into a full target: %v, want ErrNotEmpty", err)
	}

	// A damaged snapshot is refused before anything is changed.
	_, emptySrv := eventlogtest.Open(t, eventlog.Config{})
	f := filepath.Join(dir, m.Accounts[0].Streams[1].File)
	b, _ := os.ReadFile(f)
	b[len(b)/2] ^= 0xff
	os.WriteFile(f, b, 0o600)
	enc := eventlogtest.Connect(t, emptySrv)
	if err := backup.CheckFiles(dir, m, nil); err == nil {
		t.Fatal("a damaged snapshot passed the check")
	}
	js, _ := jetstream.New(enc)
	s, err := js.Stream(ctx, eventlog.DefaultEventsStream)
	if err != nil {
		t.Fatal(err)
	}
	if n := s.CachedInfo().State.Msgs; n != 0 {
		t.Fatalf("the events stream got %d messages from a refused restore", n)
	}
}

// TestReadManifest: a dir without a manifest is an unfinished backup.
func TestReadManifest(t *testing.T) {
	if _, err := backup.ReadManifest(t.TempDir()); err == nil {
		t.Fatal("a dir without a manifest was read as a backup")
	}
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, backup.ManifestFile), []byte(`{"format":99}`), 0o600)
	if _, err := backup.ReadManifest(dir); err == nil {
		t.Fatal("a manifest of an unknown format was read")
	}
}
