// Package chunk is the wire format of chat streams: the chunks a turn
// writes, how they are stored as events, and how readers get them back. It
// imports only eventlog, blob and the standard library, so readers of streams
// (the replay gateway, Go clients) do not compile the provider SDKs that
// package chat needs.
//
// # Model
//
// A chat stream is one turn's output on the chunks subject
// <prefix>.chunk.<agent>.<stream>. Each Chunk is an AI SDK UI message
// stream chunk (start, start-step, text-*, reasoning-*, tool-*,
// finish-step, then one of finish, error or abort) plus our RequestID on
// the start chunk. Its JSON is stored as it is, as one EventChunk event
// with id <stream>/<index>; a chunk larger than the server's max payload is
// stored as EventPart events <stream>/<index>.<k>, each holding a slice of
// the chunk's JSON, which an Assembler joins. Nothing is dropped.
//
// With PackChunks (agentd's record format 7, FormatChunkBatches, once every
// node reads it) several consecutive chunks are stored as one EventChunks
// event, id <stream>/<index of its first>, data {"i": <that index>, "c":
// [<chunk JSON>, ...]}: a Writer appends a chunk to the record it queued
// last while that record still waits in the Batcher's queue (behind a batch
// being stored), so the chunks written together cost one message and one
// fsync. Invariants: a stream's stored records hold its chunks 0, 1, 2, ...
// in order, each once, whatever their kinds (Span; TestPackChunks); a
// record is stored whole or not at all, so a recovery that reads the
// stored chunks and writes on from their count neither repeats nor loses
// one (TestPackedRecordRecovery); a record stays within the max payload
// (a chunk over it is split into parts as without packing). Readers take
// every chunk an event holds with Assembler.Chunks. Without PackChunks the
// records are exactly those of earlier releases.
//
// A Writer writes a stream through the process's shared eventlog.Batcher;
// an Assembler reads it back from the stored events, in order. With
// MergeDeltas a Writer folds a delta into the queued delta of the same
// block before it, so a burst of deltas is stored as one chunk with the
// same text (TestMergeDeltas). The streams
// projection (StreamsProjection, read through Streams) keeps each stream's
// metadata: status, request and message id, first and last sequence, chunk
// count and expiry, and the latest stream of each agent. It applies every
// chunk as it is stored, but a view built from nothing (a lost Pebble, a
// rebuild) is bootstrapped, not replayed: each stream's row comes from its
// first and last stored event (eventlog.Log.Ends), two reads a stream
// however many chunks it holds, and the view follows on from the sequence
// those reads cover (a chunk already in a row is not applied twice). The
// rows equal a replay's (TestStreamsBootstrapMatchesReplay), except that
// a stream's chunk count is its last chunk's index + 1, as the live view
// counted it, where a replay counts only the chunks still stored.
//
// # Live followers
//
// A Writer made with PublishLive passes each event it learns is stored
// to Live, which publishes it on <prefix>.live.<agent>.<stream> (core
// NATS, no stream stores it) with its stream sequence and, when the
// writer knows it, the sequence of the stream's event before it (a
// Writer that started the stream at chunk 0 and saw every event since
// stored). Invariants: a writer never waits for a follower (a publish
// that cannot be made is counted and dropped); a live event that names
// its predecessor names the stream's event stored right before it, so a
// follower that has that one has everything before (LiveEvent.Follows),
// and one that does not reads the log (replay.WithLive).
//
// # References
//
// A chunk's raw payload (input, output, data) over the blob threshold is
// stored once in the blob store and the chunk holds its reference under
// Blobs (Offload), a claim check, so the chunks stream never holds the
// bytes; Resolve reads them back. Text and reasoning deltas are never
// offloaded. Invariants: a chunk holds a reference only to an object
// stored before it was written (Offload stores first), and Resolve gives
// the chunk as it was before Offload (TestOffloadResolve). Readers that
// resolve are the edge: the replay gateway and replay.Client with
// WithBlobs, and package chat's recovery; a reader that does not gets the
// chunk with the field empty and Blobs set.
//
// # Retention
//
// A Sweeper purges the chunks of streams that ended (finish, error, abort)
// more than a max age ago, never those of a stream still streaming, and
// appends an EventExpired marker holding the stream's StreamInfo on its
// subject; the projection then marks the row Expired. It reads the
// projection's index of ended streams by end time (Streams.Ended), and
// takes an Owns predicate so that in a cluster only the agent's owner
// purges. Readers answer an expired stream with ErrExpired.
//
// # Deleted agents
//
// eventlog.Delete appends an agent's chunks tombstone (type
// eventlog.TypeDeleted on stream eventlog.DeletedStream) and purges every
// chunk before it. The streams projection applies it by dropping every
// stream of the agent (rows, the ended index, the latest stream) and
// keeping the tombstone's sequence (row x/<agent>), so an expiry marker of
// one of those streams that lands after it (retention racing the delete)
// does not bring the stream back; new streams of the id are a new agent's
// (TestDeletedAgentLeavesTheStreamsView). A bootstrapped view agrees: it
// leaves out every stream of an agent whose first stored event (or, for
// an expiry marker alone, the stream it names) came before the agent's
// latest tombstone, and keeps the tombstone's sequence.
//
// The format is frozen: stored streams must stay readable. Add fields and
// chunk types; never rename or repurpose one. Package chat keeps golden
// histories (chat/testdata/golden) that fail its tests when an old stream
// no longer reads.
//
// # Usage
//
//	w := chunk.NewWriter(batcher, "a1", "s1", 0, lg.MaxPayload())
//	err := w.Write(ctx, chunk.Chunk{Type: chunk.TextDelta, ID: "txt-1", Delta: "Hi"})
//	seq, err := w.Flush(ctx) // durable
//
//	var a chunk.Assembler
//	for e, err := range lg.Follow(ctx, eventlog.Filter{Agent: "a1", Stream: "s1"}, 0) {
//		cs, err := a.Chunks(e.Type, e.Data) // none (a part), one, or a packed record's
//		if len(cs) > 0 && cs[len(cs)-1].Terminal() { break }
//	}
package chunk
