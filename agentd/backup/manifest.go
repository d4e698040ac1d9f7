package backup

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/forever-agents/forever/internal/backoff"
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
	// Shards is the stream shard count of the backed-up cluster (its
	// partitions bucket's config.shards), 0 for the unsharded layout. Its
	// shard streams (FOREVER_EVENTS_<k>, FOREVER_CHUNKS_<k>) are among
	// the accounts' streams; a restore refuses a target with another
	// count, and records it in a target that has none.
	Shards int `json:"shards,omitempty"`
	// Accounts are agentd's own account first, then one per tenant.
	Accounts []Account `json:"accounts"`
	// Sealed is set when the files are encrypted (Keys.Seal).
	Sealed *Sealed `json:"sealed,omitempty"`
	// Signature is the manifest's, none on an unsigned backup (Seal).
	Signature *Signature `json:"signature,omitempty"`
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
	File string `json:"file"`
	// Size is the snapshot file's size, in bytes.
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

// Bytes is the size of the messages the stream held, as the server counts
// it (its state's bytes); Size is the snapshot file's.
func (s Stream) Bytes() uint64 {
	var st struct {
		Bytes uint64 `json:"bytes"`
	}
	_ = json.Unmarshal(s.State, &st)
	return st.Bytes
}

// The lease bucket's stream is not backed up: leases are who serves what
// now, not state to bring back. Nor is the partitions bucket's: the target
// made its own at start, with the partition count (which the manifest
// keeps and a restore checks) and epoch counters (Account.Epochs, merged).
var (
	leasesStream = "KV_" + ownership.DefaultBucket
	// auditStream is agentd's audit log (package agentd/audit). A
	// restore keeps the target's when it holds records (the ones written
	// while the target ran: an admin credential minted, a restore that
	// failed), and never undoes it, so those records are not lost.
	auditStream      = "FOREVER_AUDIT"
	partitionsStream = "KV_" + ownership.DefaultPartitionsBucket
)

// Streams lists the account's Forever streams in the order they are backed
// up and restored: the events stream, then the chunks stream, then the
// rest by name (KV buckets, as streams KV_<bucket>, and the Object Store
// bucket of payloads stored by reference, OBJ_FOREVER_BLOBS), leaving out
// the lease bucket. A sharded log's streams are its shards, in shard order
// within each kind. The events stream goes before the blob bucket, which
// only grows: every payload an event of the backup names is in it. Snapshots are per stream, at different moments: events before
// chunks means every turn the events know has its chunks, and a restore
// may hold chunks of turns whose events came later (their stream is then
// finished by recovery or stands alone; docs/operations.md).
func Streams(ctx context.Context, js jetstream.JetStream) ([]string, error) {
	var names []string
	l := js.StreamNames(ctx)
	for name := range l.Name() {
		if name == leasesStream || name == partitionsStream || !validStreamName(name) {
			continue
		}
		names = append(names, name)
	}
	if err := l.Err(); err != nil {
		return nil, fmt.Errorf("list streams: %w", err)
	}
	slices.SortFunc(names, func(a, b string) int {
		ra, ka := rank(a)
		rb, kb := rank(b)
		if d := ra - rb; d != 0 {
			return d
		}
		if d := ka - kb; d != 0 {
			return d
		}
		return strings.Compare(a, b)
	})
	return names, nil
}

// rank orders the streams of a backup: the events stream (of a sharded
// log, each shard's, in shard order: k), then the chunks stream (or
// shards), then the rest.
func rank(name string) (r, k int) {
	for i, base := range []string{"FOREVER_EVENTS", "FOREVER_CHUNKS"} {
		if name == base {
			return i, 0
		}
		if n, ok := strings.CutPrefix(name, base+"_"); ok {
			if k, err := strconv.Atoi(n); err == nil && k >= 0 && strconv.Itoa(k) == n {
				return i, k
			}
		}
	}
	return 2, 0
}

// BackupAccount snapshots every Forever stream of the account nc is
// connected to into dir/<sub>/<stream>.snap, each file synced and, with a
// seal key (Keys.Seal), encrypted, and returns the account's part of the
// manifest.
func BackupAccount(ctx context.Context, nc *nats.Conn, dir, sub, tenant string, seal []byte) (Account, error) {
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
		st, err := snapshotFile(ctx, nc, name, dir, rel, seal)
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

// epochTries bounds the compare-and-sets of one epoch counter: about 10 s
// with the pauses between them.
const epochTries = 16

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
			if try == epochTries-1 {
				return fmt.Errorf("epoch counter %s: %w", key, err)
			}
			// A live target's nodes move the counters as they acquire
			// partitions, and a read may come from a replica a write
			// behind: read again after a pause.
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(backoff.Exp(20*time.Millisecond, time.Second, try)):
			}
		}
	}
	return nil
}

// snapshotFile writes stream's snapshot to dir/rel, sealed with seal when
// it is not nil; the Size and SHA256 it returns are the file's.
func snapshotFile(ctx context.Context, nc *nats.Conn, stream, dir, rel string, seal []byte) (Stream, error) {
	f, err := os.OpenFile(filepath.Join(dir, rel), os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return Stream{}, err
	}
	h := sha256.New()
	cw := &countWriter{w: io.MultiWriter(f, h)}
	var st Stream
	if seal == nil {
		st, err = Snapshot(ctx, nc, stream, cw)
	} else {
		var s *sealer
		if s, err = newSealer(cw, seal, rel); err == nil {
			st, err = Snapshot(ctx, nc, stream, s)
			if err == nil {
				err = s.Close()
			}
		}
	}
	st.Size = cw.n
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	st.SHA256 = hex.EncodeToString(h.Sum(nil))
	return st, err
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
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

// ReadManifest reads and validates dir's manifest (ParseManifest). A dir
// without one is not a finished backup. Its signature is checked by
// Verify.
func ReadManifest(dir string) (*Manifest, error) {
	b, err := os.ReadFile(filepath.Join(dir, ManifestFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%s has no %s: not a finished backup", dir, ManifestFile)
	}
	if err != nil {
		return nil, err
	}
	return ParseManifest(b)
}

// ErrNotEmpty is returned by RestoreAccount when a stream of the target
// holds messages: a restore goes into an empty node or cluster only.
var ErrNotEmpty = errors.New("backup: the target is not empty")

// RestoreAccount restores acc's streams from dir into the account nc is
// connected to, in the manifest's order, opening sealed files with seal. It
// does not check the files: CheckFiles checks every file of the backup
// before anything of it is restored. A stream the target already has must
// be empty (agentd creates its streams at start): it is deleted and
// replaced; one with messages stops the restore with ErrNotEmpty before
// anything of the account was changed. replicas, when not 0, overrides the
// backed-up streams' replica count.
//
// A restore is all or nothing: when one stream fails, the streams restored
// before it are deleted again (agentd creates them empty), so the target is
// empty as before and a retry, with this backup or another, can restore.
// UndoAccount does the same for an account restored before another failed.
func RestoreAccount(ctx context.Context, nc *nats.Conn, dir string, acc Account, replicas int, seal []byte) error {
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	keep := map[string]bool{}
	for _, st := range acc.Streams {
		info, err := streamInfo(ctx, js, st.Name)
		if err != nil {
			return err
		}
		if info != nil && info.State.Msgs > 0 && st.Name == auditStream {
			keep[st.Name] = true // the target's records stay; the backup's are not restored
			continue
		}
		if info != nil && info.State.Msgs > 0 {
			return fmt.Errorf("%w: stream %s holds %d messages; restore into a new node or cluster", ErrNotEmpty, st.Name, info.State.Msgs)
		}
	}
	var done []string
	for _, st := range acc.Streams {
		if keep[st.Name] {
			continue
		}
		if err := restoreStream(ctx, nc, js, dir, st, replicas, seal); err != nil {
			if uerr := deleteStreams(ctx, js, slices.DeleteFunc(done, func(n string) bool { return n == auditStream })); uerr != nil {
				return fmt.Errorf("%w; undoing the streams restored before it: %w", err, uerr)
			}
			return err
		}
		done = append(done, st.Name)
	}
	return mergeEpochs(ctx, js, acc.Epochs, bucketReplicas(acc, replicas))
}

// UndoAccount deletes acc's streams from the account nc is connected to,
// after RestoreAccount restored them and a later account of the same
// backup failed: the target is then empty again (agentd creates its
// streams again, empty), but for its audit log, which keeps the records
// written since (the failed restore's). The raised epoch counters stay:
// they only rise.
func UndoAccount(ctx context.Context, nc *nats.Conn, acc Account) error {
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	var names []string
	for _, st := range acc.Streams {
		if st.Name != auditStream { // it keeps the failed restore's record
			names = append(names, st.Name)
		}
	}
	return deleteStreams(ctx, js, names)
}

// deleteStreams deletes the named streams, even when ctx is done (a
// restore cancelled half-way is undone too).
func deleteStreams(ctx context.Context, js jetstream.JetStream, names []string) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	var errs []error
	for _, name := range names {
		err := retryAPI(ctx, func() error { return js.DeleteStream(ctx, name) })
		if err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
			errs = append(errs, fmt.Errorf("delete %s: %w", name, err))
		}
	}
	return errors.Join(errs...)
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
// the two (it heals a deleted stream): then it tries again. Each node's
// guard heals at once, so on a loaded cluster the restore request lost
// that race five times in a row (TestCluster/Backup): it tries 20 times,
// and a node's guard holds the heal of a stream deleted again soon after
// its heal (1 s, doubling), so a later try wins.
func restoreStream(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, dir string, st Stream, replicas int, seal []byte) error {
	const tries = 20
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
		var r io.Reader = f
		if seal != nil {
			if r, err = newOpener(f, seal, st.File); err != nil {
				f.Close()
				return err
			}
		}
		err = Restore(ctx, nc, st, replicas, r)
		f.Close()
		if err == nil || try == tries || !lostRace(err) {
			return err
		}
		if halfRestored(err) {
			// What the failed attempt left is this restore's own.
			derr := retryAPI(ctx, func() error { return js.DeleteStream(ctx, st.Name) })
			if derr != nil && !errors.Is(derr, jetstream.ErrStreamNotFound) {
				return fmt.Errorf("%w; deleting what it left: %w", err, derr)
			}
		}
	}
}

// lostRace reports whether a restore failed because something else had
// the stream's name or store at that moment, so deleting the stream and
// restoring again can succeed: a running agentd created the stream again
// ("already in use"), the store the server restored into did not start
// empty ("expected sequence does not match store": a write raced the
// restore, or the deleted stream's files were still being removed; seen
// once in CI on TestRestoreUndo, restoring right after an undo), or the
// server removed the account's store directory, left empty by the
// deleted streams, while it created the new stream's in it ("could not
// create storage directory ... no such file or directory"; seen once in
// CI on TestRestoreUndo too).
func lostRace(err error) bool {
	var ae *apiError
	return errors.As(err, &ae) && (strings.Contains(ae.Description, "already in use") ||
		strings.Contains(ae.Description, "could not create storage directory")) || halfRestored(err)
}

// halfRestored reports whether the server failed a restore after it had
// created the stream: storing its messages into a store that did not
// start empty, or setting the new store's first sequence while the file
// store could not load its last block ("error purging stream: no message
// cache", nats-server 2.15.2; seen once in CI on TestBinary/BackupRestore,
// on a loaded machine). The stream it left is this restore's own.
func halfRestored(err error) bool {
	var ae *apiError
	return errors.As(err, &ae) && (strings.Contains(ae.Description, "expected sequence does not match store") ||
		strings.Contains(ae.Description, "no message cache"))
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

// CheckFiles checks every snapshot file of m, of every account, before
// anything of it is restored: its size and SHA-256 against the manifest's
// and, when the backup is sealed, that it opens with seal to its end.
// Against a signed manifest (Verify) that refuses a file changed, swapped
// or cut short; against an unsigned one, damage only.
func CheckFiles(dir string, m *Manifest, seal []byte) error {
	if m.Sealed == nil {
		seal = nil
	}
	for _, acc := range m.Accounts {
		for _, st := range acc.Streams {
			if err := checkFile(dir, st, seal); err != nil {
				return fmt.Errorf("%w; nothing was restored", err)
			}
		}
	}
	return nil
}

// checkFile checks the snapshot file of st against its size and checksum.
func checkFile(dir string, st Stream, seal []byte) error {
	f, err := os.Open(filepath.Join(dir, st.File))
	if err != nil {
		return err
	}
	defer f.Close()
	h := sha256.New()
	cr := &countWriter{w: h}
	r := io.TeeReader(f, cr)
	if seal != nil {
		or, err := newOpener(r, seal, st.File)
		if err != nil {
			return err
		}
		if _, err := io.Copy(io.Discard, or); err != nil {
			return err
		}
		// What the opener's buffer did not ask for, if anything.
		if _, err := io.Copy(io.Discard, r); err != nil {
			return err
		}
	} else if _, err := io.Copy(io.Discard, r); err != nil {
		return err
	}
	if n := cr.n; n != st.Size || hex.EncodeToString(h.Sum(nil)) != st.SHA256 {
		return fmt.Errorf("%s: %d bytes with checksum %s, the manifest says %d bytes with %s: the backup is damaged",
			st.File, n, hex.EncodeToString(h.Sum(nil)), st.Size, st.SHA256)
	}
	return nil
}
