// Package kvlock holds a lock as a key in a JetStream KV bucket, for an
// operation that must not run twice at once across processes (a tenant's
// move, a cluster's move into shards).
//
// Take creates the key with a TTL (the bucket must allow per-message TTLs,
// as the lease buckets do): the create fails when the key exists, so one
// taker wins. The key's value names its holder and since when. While the
// lock is held, a goroutine renews the key every third of the TTL by
// compare-and-set on its revision; the release stops it and deletes the
// key (at its revision). A holder that dies stops renewing, and the key
// lapses within the TTL, so a crash leaves no lock behind for longer.
//
// Invariants (TestTake, TestRenewalLost):
//   - while a lock is held, Take of the same key fails with a *HeldError
//     (errors.Is ErrHeld) naming the holder;
//   - after the release, Take succeeds;
//   - a lock whose renewal fails (the key was taken away: deleted, or it
//     lapsed and another took it) cancels the context Take returned, its
//     cause saying so, so the holder stops instead of going on unguarded;
//     the release then leaves the key alone.
package kvlock
