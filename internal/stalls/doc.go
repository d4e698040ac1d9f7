// Package stalls measures how long agents went without a stored event
// around a node's kill: the bench's failover scenario and chaos's stall
// watch both read the times of the agents' events from their streams
// after the fact (Stored) and measure each kill from them (Measure).
//
// Invariants (TestMeasure):
//   - an agent counts only if it wrote within Kill.Active before the
//     kill;
//   - its stall is its longest time without an event from its last event
//     before the kill until Kill.End, the last gap included;
//   - a victim's agent resumed at its first event after the kill; one
//     with none (before End, or at all with ResumeAfterEnd) counts as not
//     resumed, at End.
package stalls
