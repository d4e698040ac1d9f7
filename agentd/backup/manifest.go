package backup

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/forever-agents/forever/ownership"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Format is the version of the backup layout this package writes and reads.
const Format = 1

// ManifestFile is the manifest's name in a backup dir.
const ManifestFile = "manifest.json"

// Manifest describes a backup: what it holds and where, written last, so a
// dir without one is an unfinished backup.
type Manifest struct {
	Format  int       `json:"format"`
	Created time.Time `json:"created"`
	// Partitions is the agent partition count of the backed-up cluster
	// (its lease bucket's config.partitions), 0 when it had none yet. A
	// restore refuses a target started with another count.
	Partitions int `json:"partitions,omitempty"`
	// Accounts are agentd's own account first, then one per tenant.
	Accounts []Account `json:"accounts"`
}

// Account is the streams of one NATS account: agentd's own (Tenant empty)
// or a tenant's.
type Account struct {
	Tenant  string   `json:"tenant,omitempty"`
	Streams []Stream `json:"streams"`
	// Epochs are the account's partition epoch counters (the partitions
	// bucket's epoch.<p>), by partition number. A restore raises the
	// target's to them, so the epochs of writes after it stay above the
	// restored log's.
	Epochs map[string]uint64 `json:"epochs,omitempty"`
}

// Stream is one stream of a backup.
type Stream struct {
	Name string `json:"name"`
	// File is the snapshot's path, relative to the backup dir.
	File   string `json:"file"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
	// Config and State are the stream's, as the server reported them when
	// its snapshot began.
	Config json.RawMessage `json:"config"`
	State  json.RawMessage `json:"state"`
}

// Messages is the number of messages the stream held.
func (s Stream) Messages() uint64 {
	var st struct {
		Msgs uint64 `json:"messages"`
	}
	_ = json.Unmarshal(s.State, &st)
	return st.Msgs
}

// The lease bucket's stream is not backed up: leases are who serves what
// now, not state to bring back. Nor is the partitions bucket's: the target
// made its own at start, with the partition count (which the manifest
// keeps and a restore checks) and epoch counters (Account.Epochs, merged).
var (
	leasesStream     = "KV_" + ownership.DefaultBucket
	partitionsStream = "KV_" + ownership.DefaultPartitionsBucket
)

// Streams lists the account's Forever streams in the order they are backed
// up and restored: the events stream, then the chunks stream, then the
// rest by name (KV buckets, as streams KV_<bucket>), leaving out the lease
// bucket. Snapshots are per stream, at different moments: events before
// chunks means every turn the events know has its chunks, and a restore
// may hold chunks of turns whose events came later (their stream is then
// finished by recovery or stands alone; docs/operations.md).
func Streams(ctx context.Context, js jetstream.JetStream) ([]string, error) {
	var names []string
	l := js.StreamNames(ctx)
	for name := range l.Name() {
		if name == leasesStream || name == partitionsStream || !(strings.HasPrefix(name, "FOREVER_") || strings.HasPrefix(name, "KV_FOREVER_")) {
			continue
		}
		names = append(names, name)
	}
	if err := l.Err(); err != nil {
		return nil, fmt.Errorf("list streams: %w", err)
	}
	rank := func(n string) int {
		switch n {
		case "FOREVER_EVENTS":
			return 0
		case "FOREVER_CHUNKS":
			return 1
		}
		return 2
	}
	slices.SortFunc(names, func(a, b string) int {
		if d := rank(a) - rank(b); d != 0 {
			return d
		}
		return strings.Compare(a, b)
	})
	return names, nil
}

// BackupAccount snapshots every Forever stream of the account nc is
// connected to into dir/<sub>/<stream>.snap, each file synced, and returns
// the account's part of the manifest.
func BackupAccount(ctx context.Context, nc *nats.Conn, dir, sub, tenant string) (Account, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return Account{}, err
	}
	names, err := Streams(ctx, js)
	if err != nil {
		return Account{}, err
	}
	if err := os.MkdirAll(filepath.Join(dir, sub), 0o700); err != nil {
		return Account{}, err
	}
	acc := Account{Tenant: tenant, Streams: []Stream{}}
	for _, name := range names {
		rel := filepath.Join(sub, name+".snap")
		st, err := snapshotFile(ctx, nc, name, filepath.Join(dir, rel))
		if err != nil {
			return acc, err
		}
		st.File = rel
		acc.Streams = append(acc.Streams, st)
	}
	if acc.Epochs, err = readEpochs(ctx, js); err != nil {
		return acc, err
	}
	return acc, nil
}

// readEpochs reads the account's epoch counters, none when it has no
// partitions bucket.
func readEpochs(ctx context.Context, js jetstream.JetStream) (map[string]uint64, error) {
	kv, err := js.KeyValue(ctx, ownership.DefaultPartitionsBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("partitions bucket: %w", err)
	}
	keys, err := kv.ListKeys(ctx)
	if errors.Is(err, jetstream.ErrNoKeysFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("partitions bucket: %w", err)
	}
	out := map[string]uint64{}
	for k := range keys.Keys() {
		p, ok := strings.CutPrefix(k, ownership.EpochKeyPrefix)
		if !ok {
			continue
		}
		e, err := kv.Get(ctx, k)
		if err != nil {
			return nil, fmt.Errorf("partitions bucket: %w", err)
		}
		if out[p], err = strconv.ParseUint(string(e.Value()), 10, 64); err != nil {
			return nil, fmt.Errorf("partitions bucket: %s is %q: %w", k, e.Value(), err)
		}
	}
	return out, nil
}

// mergeEpochs raises the target's epoch counters to the backup's, each by
// a compare-and-set (tried again when an acquisition moved it meanwhile),
// never lowering one. A target no node has started on yet gets its
// partitions bucket here, with replicas copies.
func mergeEpochs(ctx context.Context, js jetstream.JetStream, epochs map[string]uint64, replicas int) error {
	if len(epochs) == 0 {
		return nil
	}
	kv, err := ownership.OpenPartitionsBucket(ctx, js, replicas)
	if err != nil {
		return fmt.Errorf("partitions bucket of the target: %w", err)
	}
	for p, want := range epochs {
		key := ownership.EpochKeyPrefix + p
		for try := 0; ; try++ {
			e, err := kv.Get(ctx, key)
			switch {
			case errors.Is(err, jetstream.ErrKeyNotFound):
				_, err = kv.Create(ctx, key, []byte(strconv.FormatUint(want, 10)))
			case err != nil:
			default:
				have, _ := strconv.ParseUint(string(e.Value()), 10, 64)
				if have >= want {
					err = nil
					break
				}
				_, err = kv.Update(ctx, key, []byte(strconv.FormatUint(want, 10)), e.Revision())
			}
			if err == nil {
				break
			}
			if try == 5 {
				return fmt.Errorf("epoch counter %s: %w", key, err)
			}
		}
	}
	return nil
}

func snapshotFile(ctx context.Context, nc *nats.Conn, stream, path string) (Stream, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return Stream{}, err
	}
	h := sha256.New()
	st, err := Snapshot(ctx, nc, stream, io.MultiWriter(f, h))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	st.SHA256 = hex.EncodeToString(h.Sum(nil))
	return st, err
}

// WriteManifest writes m as dir/manifest.json, synced, after every
// snapshot: its presence marks a finished backup.
func WriteManifest(dir string, m *Manifest) error {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, ManifestFile+".tmp")
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(append(b, '\n'))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, ManifestFile))
}

// ReadManifest reads dir's manifest. A dir without one is not a finished
// backup.
func ReadManifest(dir string) (*Manifest, error) {
	b, err := os.ReadFile(filepath.Join(dir, ManifestFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%s has no %s: not a finished backup", dir, ManifestFile)
	}
	if err != nil {
		return nil, err
	}
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("%s: %w", ManifestFile, err)
	}
	if m.Format != Format {
		return nil, fmt.Errorf("%s: format %d, this agentd reads format %d", ManifestFile, m.Format, Format)
	}
	return &m, nil
}

// ErrNotEmpty is returned by RestoreAccount when a stream of the target
// holds messages: a restore goes into an empty node or cluster only.
var ErrNotEmpty = errors.New("backup: the target is not empty")

// RestoreAccount restores acc's streams from dir into the account nc is
// connected to, in the manifest's order. A stream the target already has
// must be empty (agentd creates its streams at start): it is deleted and
// replaced; one with messages stops the restore with ErrNotEmpty before
// anything of the account was changed. replicas, when not 0, overrides the
// backed-up streams' replica count. Each snapshot's checksum is checked
// first.
func RestoreAccount(ctx context.Context, nc *nats.Conn, dir string, acc Account, replicas int) error {
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	for _, st := range acc.Streams {
		if err := checkFile(dir, st); err != nil {
			return err
		}
		info, err := streamInfo(ctx, js, st.Name)
		if err != nil {
			return err
		}
		if info != nil && info.State.Msgs > 0 {
			return fmt.Errorf("%w: stream %s holds %d messages; restore into a new node or cluster", ErrNotEmpty, st.Name, info.State.Msgs)
		}
	}
	for _, st := range acc.Streams {
		if err := restoreStream(ctx, nc, js, dir, st, replicas); err != nil {
			return err
		}
	}
	return mergeEpochs(ctx, js, acc.Epochs, bucketReplicas(acc, replicas))
}

// bucketReplicas is the replica count of a partitions bucket a restore
// creates: replicas when given, else the most the backed-up streams had.
func bucketReplicas(acc Account, replicas int) int {
	if replicas > 0 {
		return replicas
	}
	n := 1
	for _, st := range acc.Streams {
		var cfg struct {
			Replicas int `json:"num_replicas"`
		}
		if json.Unmarshal(st.Config, &cfg) == nil {
			n = max(n, cfg.Replicas)
		}
	}
	return n
}

// restoreStream deletes the target's empty stream, if any, and restores
// st in its place. A running agentd may create the stream again between
// the two (it heals a deleted stream): then it tries again.
func restoreStream(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, dir string, st Stream, replicas int) error {
	const tries = 5
	for try := 1; ; try++ {
		info, err := streamInfo(ctx, js, st.Name)
		if err != nil {
			return err
		}
		if info != nil {
			if info.State.Msgs > 0 {
				return fmt.Errorf("%w: stream %s received %d messages during the restore", ErrNotEmpty, st.Name, info.State.Msgs)
			}
			err := retryAPI(ctx, func() error { return js.DeleteStream(ctx, st.Name) })
			if err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
				return fmt.Errorf("restore %s: delete the empty stream: %w", st.Name, err)
			}
		}
		f, err := os.Open(filepath.Join(dir, st.File))
		if err != nil {
			return err
		}
		err = Restore(ctx, nc, st, replicas, f)
		f.Close()
		var ae *apiError
		if err == nil || try == tries || !errors.As(err, &ae) || !strings.Contains(ae.Description, "already in use") {
			return err
		}
	}
}

func streamInfo(ctx context.Context, js jetstream.JetStream, name string) (*jetstream.StreamInfo, error) {
	var s jetstream.Stream
	err := retryAPI(ctx, func() (err error) {
		s, err = js.Stream(ctx, name)
		return err
	})
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", name, err)
	}
	return s.CachedInfo(), nil
}

// checkFile checks the snapshot file of st against its size and checksum.
func checkFile(dir string, st Stream) error {
	f, err := os.Open(filepath.Join(dir, st.File))
	if err != nil {
		return err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return err
	}
	if n != st.Size || hex.EncodeToString(h.Sum(nil)) != st.SHA256 {
		return fmt.Errorf("%s: %d bytes with checksum %s, the manifest says %d bytes with %s: the backup is damaged",
			st.File, n, hex.EncodeToString(h.Sum(nil)), st.Size, st.SHA256)
	}
	return nil
}
