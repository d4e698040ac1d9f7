// Package leaderread asks a JetStream stream's leader where a subject's
// messages end, for readers that must not stop short on a replica behind.
//
// A consumer (an ordered or an R1 one) is placed on any peer of a
// replicated stream. On a replica that lags behind the leader it reports
// none pending (NumPending 0) before the last message the leader holds,
// and a direct get (with AllowDirect) may be answered by that replica
// too. A reader that ends a listing "when nothing is pending" then stops
// short. Last and Next send the stream's message get request
// ($JS.API.STREAM.MSG.GET), which only the stream's leader answers, even
// on a stream that allows direct gets: a reader reads Last before it
// starts and reads up to it, and asks Next (NextSince before its first
// message, for a consumer by start time) when its consumer says none
// pending (or delivers nothing) before it, to tell a replica behind (the
// leader holds a next message: wait for it) from messages removed
// meanwhile (age, limits, a purge: nothing more up to Last).
//
// eventlog keeps its own leader gets (fence.go, ends.go), with the
// retries its writers need, and decodes their answers with Decode; Last
// and Next serve the tools and listings outside it (agentd audit tail,
// internal/stalls).
//
// Invariants (TestLastAndNext, TestAPIPrefix, TestOnCluster):
//   - Last is the sequence of the last message on a subject (wildcards
//     allowed) as the leader holds it, 0 when there is none;
//   - Next is the sequence of the first message at or after a sequence
//     on a subject, NextSince the first stored at or after a time (where
//     a consumer delivering by start time starts), 0 when there is none;
//   - both are answered by the leader, also on a stream with direct gets
//     allowed, to the API prefix js sends its own requests to, and carry
//     a refusal as a *jetstream.APIError, as Decode does.
package leaderread
