// Package kvwatch follows every key of a JetStream KV bucket, and restarts
// its watch when the watch falls behind the bucket.
//
// A KV watch is an ordered consumer that lives on one server. When that
// server dies while the bucket lives on in the cluster, the watch delivers
// nothing until nats.go notices missing heartbeats (19 s measured in a
// 3-node cluster), and every write of those seconds (a tenant created, a
// token revoked) reaches this process late. Run compares, every Check, the
// bucket's last sequence (a stream info request to its leader) with the
// newest revision the watch delivered; a watch that stays behind for Lag
// is made again.
//
// # Invariants
//
//   - Every entry is handed to Apply in revision order within one watch; a
//     restarted watch hands the current value of every key again, so Apply
//     must be idempotent for an unchanged revision.
//   - Synced is called once per watch, after the bucket's values at its
//     start were handed over; first is true for the first watch only.
//   - Nothing written to the bucket stays undelivered longer than about
//     Check + Lag while the bucket's leader answers (TestWatchOutlivesItsServer).
package kvwatch
