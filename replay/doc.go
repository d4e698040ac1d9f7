// Package replay lets clients read chat streams from any point: cursors, a Go
// client that follows a stream, and the HTTP gateway (Server-Sent Events in
// the AI SDK UI message stream format, a WebSocket with a resume handshake,
// and a chat page).
//
// # Model
//
// A chat stream is the chunks of one LLM turn, stored on the chunks stream
// under <prefix>.chunk.<agent>.<stream> (see chunk.Writer). A Cursor is
// a chunk's stream sequence there (the sequence of its last part when the
// chunk was split), and, for a chunk inside a packed record
// (chunk.EventChunks) that is not the record's last, its place in the
// record: a follow after it reads that record again and skips the chunks
// up to it. Replay is a consumer replay: following after cursor N
// reads the chunks stored after N with batched direct gets
// (eventlog.Log.NextBatch, up to 256), so they show without waiting for a
// consumer, then opens one JetStream ordered consumer filtered to the
// stream's subject, started right after the last one read, which delivers
// the rest of the stored chunks and then the live ones. A direct get may be
// answered by a replica behind the leader, which holds a prefix of the
// stream, so the consumer goes on from there without a gap. There is no
// separate live path, so nothing falls between history and live.
//
// A Client made WithLive (the gateway of an agentd node, given
// GatewayConfig.Live) follows a running turn without a consumer: the
// turn's writer publishes each chunk event it learns is stored
// (chunk.Live: its sequence, and its predecessor's in the stream when
// the writer knows it) on core NATS, and the follow, subscribed before
// it reads the stored chunks, takes a live event only when its
// predecessor is the last event it handled. Anything else is read from
// the log: the events between (a gap: the messages the subscription
// dropped, or published before it reached the writer's server), the
// stored ones after livePoll without a live event, and after liveIdle
// without any (the writer is gone) a consumer goes on from the last one
// read. The log is the source of truth; the live messages only save the
// consumer.
//
// # Invariants
//
//   - Replay from a cursor yields every later chunk of the stream once and in
//     order, with no gap, history then live; cursors strictly increase.
//   - Resuming after the last cursor seen continues exactly where the
//     previous follow stopped, across client disconnects and server
//     restarts (the log is the only state).
//   - A follow ends after the stream's terminal chunk (finish, error,
//     abort); following an ended stream replays it and ends.
//   - A follow that reads the terminal chunk among the stored ones creates
//     no consumer (TestFollowOfStoredStreamCreatesNoConsumer): in a
//     cluster a consumer costs two proposals of the JetStream meta group,
//     which every server stores and applies, so a short turn followed
//     after it ended costs the cluster nothing that grows with its size.
//   - A live follow (WithLive) yields what a consumer's follow yields:
//     every chunk once, in order, with the same cursors, across the
//     writer's death (TestLiveFollowAcrossWriterDeath), and creates no
//     consumer while live events keep coming
//     (TestLiveFollowCreatesNoConsumer).
//   - A follower never holds a writer back: nothing waits for a live
//     message to be taken, and a follower's buffer drops what it cannot
//     hold, which it then reads from the log
//     (TestLiveSlowFollowerDoesNotBlockWriter).
//   - A client going away never stops a turn: only POST .../stop (or a
//     WebSocket "stop" frame) calls Chats.Stop.
//
// # Payloads by reference
//
// A chunk may hold a payload over the blob threshold by reference
// (chunk.Blobs: a tool's input or output, a data part). A Client made with
// WithBlobs, and the gateway given GatewayConfig.Blobs, read it back, so
// every client sees each chunk as it was written, never the reference
// (TestSSEResolvesChunkReferences); resolving changes neither which chunks
// are yielded nor their cursors. A chunk whose object is missing is an
// error item of the Client, and the gateway skips it
// (forever_replay_lost_payloads_total) as it skips a corrupt chunk.
//
// # Cursors on the wire
//
// A client sees a cursor as a string of decimal digits everywhere: SSE
// "id:" lines, the "cursor" of WebSocket frames, and any JSON that
// carries a Cursor (its MarshalJSON writes "42"; a JSON number loses
// precision in JavaScript past 2^53). A chunk inside a packed record that
// is not its last has "<seq>.<k>" ("42.1": after chunk 1 of the record
// at 42); the record's last chunk has the plain "42", which means what it
// meant before records were packed (after the whole record), so old
// cursors resume exactly (TestResumeInsidePackedRecord). Where a client sends one back it is
// a string too (Last-Event-ID, ?after=); a JSON Cursor also reads a number
// of digits, for peers that still send one. The cursor of a started turn
// (Turn.After, the chat reply's "cursor") is the stream's real start: the
// agent's last chunk sequence when the turn was accepted, so every chunk of
// the new stream is after it and following after it yields the stream from
// its first chunk.
//
// # HTTP gateway
//
// NewGateway returns an http.Handler with the AI SDK's conventions, so a
// stock useChat client (DefaultChatTransport with api "/v1/chat") works:
//
//   - POST /v1/chat with {id, messages, ...}: Chats.Send starts a turn for
//     agent id; the response streams it as SSE (content-type
//     text/event-stream, x-vercel-ai-ui-message-stream: v1): one
//     "id: <cursor>\ndata: <chunk json>\n\n" event per chunk, then
//     "data: [DONE]". Chunks carry only the fields the AI SDK v5 schema of
//     their type allows (no requestId, no finishReason).
//   - GET /v1/chat/{id}/stream: resumes the agent's unfinished turn from
//     its start chunk (same messageId), then live; 204 when there is none.
//     With Last-Event-ID or ?after=<cursor>, only what follows the cursor. A
//     finished latest stream is 204, except with ?after=, which replays its
//     tail after the cursor (possibly nothing) and [DONE]. A resume whose
//     chunks retention removed (the stream is marked expired, or its first
//     chunks are gone and the cursor is before the first one stored) is 410
//     Gone {"code":410,"error":"chunks expired: ..."}; an idle chat without
//     ?after= stays 204.
//   - POST /v1/chat/{id}/stop: Chats.Stop; 200 {"stopped": bool}.
//   - GET /v1/chat/{id}/messages[?limit=N&after=<message id>]:
//     Chats.Messages as JSON, a page when the query asks for one.
//   - GET /v1/chat/{id}/ws: the WebSocket protocol below.
//   - GET /: the chat page (web/index.html).
//
// Closing GatewayConfig.Stopping ends every SSE response (without [DONE])
// and WebSocket (close 1001), so a server can shut down; turns go on.
//
// # Errors
//
// Every error the gateway sends has the one shape of package
// internal/apierror, {"code": N, "error": "<sentence>"}, with N the HTTP
// status (400 bad input, 403 origin refused, 404 unknown chat, stream or
// endpoint, 409 conflict, 410 chunks expired, 413 a body's new message
// and other fields over GatewayConfig.MaxBodyBytes, 429/503 with Retry-After, 500, 504): HTTP
// bodies, WebSocket error frames ({"type":"error","requestId"?,"code",
// "error"}), and the AI SDK error chunk that ends an SSE stream whose
// follow fails for good (404, 410; a transient failure ends the response
// without [DONE] and the client resumes with Last-Event-ID). Messages name
// the field, header or parameter as the client sent it (a JSON path such
// as "body.messages[0].id") and never a Go type or package: errors are
// translated once, at the edge (apiError). An *apierror.Error from Chats
// is sent as it is; another error with a StatusCode() int method keeps its
// code but gets the code's fixed sentence (apierror.Text), since its
// message was not written for clients; anything else is 500. Unknown
// paths and methods are 404, as Stripe answers an unrecognized URL.
//
// # WebSocket protocol
//
// GET /v1/chat/{id}/ws follows the resume handshake of Cloudflare's agents
// (AIChatAgent's ResumableStream: notify, ack, replay), with the chunks in
// the log instead of SQLite. Frames are JSON text messages; cursors in
// them are strings of digits.
//
// Offers. The server sends one offer when the client connects, and one in
// answer to each {"type":"resume","probeId"?} the client sends (a client
// sends it once its handler is registered, so an offer sent on connect
// before that is not lost). Offers are never deduplicated: a client that
// connects and then asks gets two, and acks one. The answer to a resume
// echoes its probeId (an opaque string the client uses to match answers to
// probes); the offer sent on connect has none.
//
//	{"type":"resuming","requestId","streamId","messageId","probeId"?}  a turn streaming
//	{"type":"resuming",...,"status":"error","probeId"?}                the last turn failed
//	{"type":"pending","requestId","probeId"?}                         started, no chunk yet
//	{"type":"none","reason":"idle","probeId"?}                        nothing to resume
//
// "idle" is the only reason: no turn runs, waits to write its first chunk,
// or failed since the last turn started. (Cloudflare's other reason,
// "continuation-owned", has no counterpart: any connection may resume any
// turn of its chat.)
//
// Ack and replay. Nothing is streamed until the client acks with
// {"type":"ack","requestId"}:
//
//   - the requestId of the turn offered last (resuming, pending, or one
//     this connection started): whatever the connection was streaming
//     stops, and the whole buffer of the turn is sent from its start:
//     the chunks stored when the ack arrived, flagged replay, then
//     replayComplete, then the live chunks, then done. Every ack does it
//     again (a client that acks twice gets the buffer twice, so a client
//     acks once per turn and discards what it had of the turn when it
//     acks);
//   - another requestId while a turn is offered: ignored (a stale ack);
//   - while nothing runs, the requestId of the latest turn (it ended
//     between offer and ack): replayed whole, then done; any other
//     requestId: {"type":"done","requestId","replay":true} at once, so the
//     client's resume does not wait for a timeout.
//
// The frames of a replay, in order:
//
//	{"type":"chunk","requestId","cursor":"<n>","chunk":{...},"replay":true}
//	{"type":"replayComplete","requestId","cursor":"<last replayed>"}
//	{"type":"chunk","requestId","cursor":"<n>","chunk":{...},"replay":false}
//	{"type":"done","requestId","status":"completed|error|aborted"}
//
// A turn that ended in error is replayed up to its error chunk and done
// says "error"; when the latest turn failed, it is offered (resuming with
// status "error") until another turn starts, so a client that reconnects
// after the failure learns of it. A client that has seen it need not ack.
//
// Other frames. {"type":"chat","body":{AI SDK body}} starts a turn
// (answered {"type":"started","requestId","streamId","messageId",
// "cursor"}, cursor being Turn.After, then its chunks live with replay
// false, then done) and becomes the connection's offer; {"type":"stop"} is answered {"type":"stopped",
// "stopped":bool}. A bad frame (binary, not JSON, an unknown type, an ack
// without requestId) is answered {"type":"error","code":400,"error":"..."};
// the connection stays open. An ack of a turn whose chunks retention
// removed, or a follow that finds them gone, is answered {"type":"error",
// "requestId","code":410,"error":"chunks expired: ..."}.
//
// # Host check and CORS in front of a server
//
// Two handlers go in front of everything a server mounts, outermost first:
//
//	hosts, err := replay.ParseHostPatterns(allowedHosts) // --allowed-host
//	h := replay.HostCheck(hosts, replay.CORS(corsOrigins, auth(mux)))
//
// HostCheck serves a request only when its Host is a loopback name or
// address (localhost or a name under it, 127.0.0.0/8, ::1; any port) or
// matches a HostPattern ("app.example.com", "*.example.com",
// "host:8080", "192.168.1.5", "[2001:db8::1]:8080"); anything else, a
// missing Host included, gets 403 {"code":403,"error":"..."} before any
// handler runs. That closes DNS rebinding: a page whose name its attacker
// points at 127.0.0.1 sends its own name as Host. A server without auth
// must use it; one with auth uses it when hosts are listed.
//
// CORS answers a browser's preflight from an allowed origin (204, without
// credentials) and puts the CORS headers on every answer to that origin, a
// 401 of the authentication included, so a page on another origin can
// call a server that authenticates; an origin not allowed gets 403 before
// the authentication runs. The gateway behind it does not apply the rules
// a second time.
//
// Invariants of the edge:
//   - No request with a Host other than loopback or a listed pattern
//     reaches a handler behind HostCheck.
//   - Every error the gateway sends is {"code","error"} with the HTTP
//     status as code and a message naming no Go type or package.
//   - Every cursor a client sees is a JSON string (or SSE id) of digits,
//     with ".<k>" inside a packed record.
//
// # Usage
//
//	c := replay.NewClient(lg, replay.WithBlobs(blob.NewReader(js, ""))) // lg opened with eventlog.Config{Bind: true}
//	for it, err := range c.Follow(ctx, agent, stream, after) {
//		if err != nil { /* ctx done, or a chunk that does not decode */ }
//		after = it.Cursor // resume here after a disconnect
//	}
//
//	gw, err := replay.NewGateway(replay.GatewayConfig{Log: lg, Chats: host,
//		Streams: replay.ProjectedIndex{Streams: chunk.NewStreams(view)}, Stopping: stopping})
//	mux.Handle("/", gw)
package replay
