// Package compaction keeps an agent's log proportional to its live state:
// it decides when an agent is compacted (eventlog.Log.Compact: a snapshot
// of every view's rows of the agent, then a purge of the events before it)
// and runs the compactions on the node that owns the agent.
//
// # Policy
//
// The stats view ("compaction") counts, per agent, the events and bytes
// stored since its last snapshot. An agent is compacted:
//
//   - when it passes Config.Events events or Config.Bytes bytes since its
//     last snapshot, found by a sweep every Config.Every that reads only
//     the agents past a fixed floor (CandidateEvents events or
//     CandidateBytes bytes), never every agent;
//   - when it goes idle (Compactor.Idle, called by agentd when it
//     deactivates an agent) with at least Config.IdleEvents events since
//     its last snapshot.
//
// Finished fibers need no trigger of their own: their rows leave the runs
// view when they end, so the next snapshot drops them and the purge drops
// their events.
//
// # Invariants
//
//   - Only the agent's owner compacts it (Config.Owns, and the log's
//     fencing under the snapshot append), so two nodes never compact one
//     agent; one node never runs two compactions of one agent at once.
//   - A compaction that fails or conflicts (the agent wrote meanwhile)
//     changes nothing visible: the views keep their rows, and the agent is
//     tried again by a later sweep.
//   - Every view's rows are the same before and after compaction, and a
//     view rebuilt from an empty Pebble gets them back (see
//     eventlog.Log.Compact).
package compaction
