// Package blob stores large payloads once, by their SHA-256 digest, in a
// JetStream Object Store bucket, and gives back a reference (a claim
// check) an event holds instead of the bytes.
//
// An object is named by its digest, so identical payloads are stored once
// and an object never changes: a reference read on any node, at any time,
// names the same bytes. Put returns only once the object is stored (the
// bucket's stream acknowledged every chunk), so an event appended after
// Put never names an object that is not there.
//
// # References and the sweep
//
// RefsView, a view of the events stream, keeps a row per (agent, object)
// for every object an agent's stored events name (found by a Ref's JSON
// encoding, FindRefs). A fork takes its parent's rows when it is made; a
// compaction keeps an agent's rows in its snapshot; a delete drops them.
// A Sweeper deletes the objects no row names once they were last put
// more than a grace period ago; a Put of bytes already stored touches
// their object, so its age counts from the last Put.
//
// Invariants:
//
//   - An object named by any stored event of an agent that is not deleted,
//     or inherited by a fork of such an agent, is never deleted by a
//     Sweeper, provided the event was appended within the grace period of
//     the Put that returned its reference (chat appends it right after).
//   - A sweep deletes nothing unless its view has applied every event
//     stored when it began and no event it should have read was
//     quarantined (ErrIncomplete).
//   - A Put and a delete of the same object never both win: both store the
//     object's meta message only if it is still the one they read, so an
//     object a Put returned is there, or the Put stored it again.
//   - An object no row names and last put more than the grace period ago
//     is deleted by the next sweep; identical payloads share one object,
//     kept while any agent names it.
//
// Rows are released only by a delete: an object an agent named once stays
// until that agent, and every fork that inherited it, is deleted, even
// after a compaction or an edit of the conversation dropped the event
// (conservative: the view never reads what a snapshot's rows mean). A
// fork inherits every object its parent named when it was made, not only
// those before its cut.
package blob
