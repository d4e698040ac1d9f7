// Package agents is the view of every agent a node hosts, whatever its
// type: its status, its first and last activity, and the user context
// clients give it (a user id, tags and metadata, set with EventMeta),
// with indexes by user and by tag, and the paged listing read from it
// (View.List). agentd's host serves the listing (forever.list, GET
// /v1/agents, agentd agents) and the meta verb from it.
//
// # Model
//
// The view (Projection, "agents") reads the events stream. Every event of
// an agent updates its row: the time of its first event is its creation,
// of its latest its last activity; fiber starts and ends say whether it
// runs, and chat turn outcomes whether it waits for a tool answer or
// failed (the Status* constants, derived from the log alone); chat's
// sub-agent link events (subagent.started, subagent.ended) its children:
// one per child agent with its type, last mode and link status, the one
// called last at the end, at most MaxChildren (the oldest child not
// running is dropped first). EventMeta's
// MetaPatch sets its user context; an Initial patch (the meta of an
// agent's first command) applies only while none is set.
//
// Keys: a/<agent> holds the row, u/<user>\x00<agent> and t/<tag>\x00<agent>
// index it. A listing scans one of them from its cursor (the last agent id
// of the previous page, base64url-encoded) and checks the other filters on
// each row, so a page costs what it returns plus the rows its filters
// skip; a filter by type uses the id's "type:" prefix, and skips whole
// blocks of other types' ids.
//
// # Invariants
//
//   - The view is a function of the log: rebuilt from an empty Pebble it
//     holds the same rows (TestViewRebuildsTheSame), and compaction keeps
//     them (AgentRows yields the row and its index rows).
//   - A deleted agent has no row and no index row (eventlog.Delete's
//     tombstone), and the id used again starts a new row.
//   - A listing never skips nor repeats an agent that exists through all
//     its pages: pages are in id order and each resumes after the last id
//     of the one before (TestListPages).
//   - Bad user context is refused before it is written (MetaPatch.Validate,
//     ErrInvalid); a patch in the log that breaks the rules is applied field
//     by field, what fits, so Apply never fails.
package agents
