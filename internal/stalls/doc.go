// Package stalls measures how long agents went without a stored event
// around a node's kill: the bench's failover scenario and chaos's stall
// watch both read the times of the agents' events from their streams
// after the fact (Stored) and measure each kill from them (Measure).
//
// Invariants (TestMeasure):
//   - an agent counts only if it wrote within Kill.Active before the
//     kill; it is the victim's when Kill.Victim holds it, or when its last
//     event before the kill was written by Kill.VictimNode;
//   - its stall is its longest time without an event from its last event
//     before the kill until Kill.End, the last gap included;
//   - a victim's agent resumed at its first event after the kill; one
//     with none (before End, or at all with ResumeAfterEnd) counts as not
//     resumed, at End.
//
// Invariant (TestStoredFromReplicaBehind): Stored reads a stream up to the
// last event of its subjects the stream's leader held when the read began
// (internal/leaderread), or the first past its end time; not up to an
// event its consumer, on a replica behind the leader, delivers with none
// pending. A stream whose events up to there were removed meanwhile (or
// with none since the start) ends its read.
package stalls
