// Package backup snapshots Forever's streams and KV buckets through
// JetStream's own snapshot API, and restores them into a new node or
// cluster. agentd backup and agentd restore are built on it.
//
// # Model
//
// A backup is a directory: one snapshot file per stream, in the server's
// own format (an s2-compressed archive of the stream's store, without its
// consumers), grouped by account (agentd's own, then one per tenant), and a
// manifest written last, holding each stream's config, state, size and
// SHA-256. The lease bucket is left out: leases say who serves what now.
// So is the partitions bucket: its partition count and epoch counters go
// into the manifest instead, and a restore checks the count and raises the
// target's counters to the backup's, so the epochs of writes after a
// restore stay above the restored log's.
//
// # Keys
//
// The manifest is signed (HMAC-SHA256, Manifest.Seal) with a key derived
// by HKDF from the cluster's auth secret or, without one, from the
// encryption key; with the encryption key every snapshot file is sealed
// (AES-256-GCM in 128 KiB records whose nonces count them and mark the
// last, with the file's path as additional data: seal.go). A restore runs
// Manifest.Verify and CheckFiles before it changes anything; an unsigned
// manifest passes Verify only when the caller allows it.
//
// # Consistency
//
// Each stream is snapshotted at one moment, and streams one after the
// other: a backup is consistent per stream, not across streams. The events
// stream goes first and the chunks stream second, so every turn the events
// know has at least the chunks it had then; the chunks may run ahead (more
// of a turn's stream, or streams of turns whose events came after). On the
// restored node that is what a crash at the moment of the events snapshot
// would have left, and recovery treats it so: a turn in flight is
// continued from its stored stream, a fiber from its last stash.
//
// # Invariants
//
//   - A restore goes into an empty target only: a stream that holds
//     messages stops it (ErrNotEmpty) before anything of that account is
//     changed. agentd creates its streams at start, so an empty one is
//     deleted and replaced.
//   - A snapshot file whose size or checksum differs from the manifest, a
//     manifest whose signature does not match, and a sealed file that does
//     not open are refused before anything is changed (Verify, CheckFiles).
//   - A restore is all or nothing: RestoreAccount deletes the streams it
//     restored when a later one fails, and UndoAccount those of an account
//     restored before another failed, so the target is empty again.
//   - A dir without a manifest is not a backup: an interrupted backup is
//     never restored.
package backup
