// Command chaos crashes a real agentd over and over under load and checks
// afterwards, with package verify, that its log kept every invariant.
//
//	go run ./chaos -kills 20 [-bin path/to/agentd] [-seed N]
//	go run ./chaos -nodes 3 -kills 50 -lease-ttl 3s [-auth=false]
//	go run ./chaos -nodes 3 -kills 50 -lease-ttl 3s -stepdowns 20 -handoffs 5 [-seed N]
//	go run ./chaos -nodes 6 -kills 20 -lease-ttl 3s -stall-agents 12 -agentd-flags "--shards 8 --owned-views"
//
// It builds agentd (unless -bin names one) and starts it on temporary data
// dirs with the embedded NATS server: one node, or with -nodes n a cluster
// of n nodes started as the Helm chart starts its pods with its default
// values (internal/chartargs: clustered embedded servers routed to each
// other on loopback, R3 streams, 64 partitions, leases of -lease-ttl, auth
// on with one secret file every node shares), plus the flags below that
// make kills land everywhere. With auth, agents live in tenants: chaos
// creates one (agentd tenant create, with the admin credential the first
// node wrote, and --max-conns twice the connections the load and agentd
// hold in it) and runs its load in it, with the credential of agentd's own
// user in it (tenancy.AdminAccessSubject); -auth=false runs the cluster
// without auth, as the chart's auth.enabled=false does.
//
// # Load
//
// Mixed load over NATS, each worker on its own connection, the workers'
// preferred nodes spread over the cluster and every node listed to fail
// over to (a stalled node is left within seconds, by its pings):
//
//   - chat turns on a few chat agents (the local model, alternating a plain
//     message and a /tool clock {} call), each command's text carrying a
//     marker unique in the run. Each command gets one of four identities at
//     random: a message id, a requestId in the payload, an Idempotency-Key
//     header, or none. One with an identity is sent again with it when its
//     reply is lost, it is refused as busy (409) or its turn is being
//     confirmed (504, counted as "chat unconfirmed"), and must run once
//     however often it is sent; one without is sent again only after a
//     409, and gets the id the node that receives it mints, which must make
//     it run once however often routing retries it between nodes. Each
//     acknowledged turn is followed to its end with replay.Client across
//     the crashes (resuming from the last cursor), then replayed from a
//     random cursor;
//   - steps fibers started on a few steps agents.
//
// Meanwhile it SIGKILLs a random node at random intervals and restarts it,
// and sometimes freezes one with SIGSTOP instead, then SIGCONT. On a
// cluster a killed node stays down for a random part of a lease TTL (its
// partitions may move meanwhile), a freeze lasts 0.3 to 2 lease TTLs (past
// one, the node finds its leases gone when it continues), and each kill or
// freeze first waits until every node is ready (/readyz 200, which on a
// cluster includes its JetStream replicas being current): the cluster loses
// one node at a time, as R3 allows. Short leases (-lease-ttl 3s) make
// ownership change under load often.
//
// # Stepdowns and handoffs
//
// On a cluster, two more shapes (shapes.go) are placed at random between
// the kills, each after every node is ready; both are off unless asked
// for, so CI's runs are as before:
//
//   - -stepdowns N: N times, just after a chat command is sent (its turn's
//     first writes in flight; after 10 s without one, at once), the events
//     stream's JetStream leader is made to step down
//     ($JS.API.STREAM.LEADER.STEPDOWN.FOREVER_EVENTS, or on a cluster
//     with --shards that chat's agent's shard FOREVER_EVENTS_<k>, in the
//     load's account), so appends stall in the election past their callers'
//     deadlines; meanwhile every chat command in flight that has an
//     identity (from its first send until its turn's stream ended) is sent
//     again with it, each attempt giving up after 1 s and sent again after
//     that, a 409, a 503 or a 504, up to 10 times, as a client whose reply
//     is late does;
//   - -handoffs N: N times, just after a chat command is sent (after 10 s
//     without one, as when every turn waits for a moved partition, any
//     chat in flight will do), the node that holds its agent's partition
//     lease (the cluster subject's leases) is stopped with SIGTERM, which
//     hands off its partitions to the others without a kill; every chat
//     command in flight is sent again over a connection to another node
//     meanwhile (3 s attempts), and once more when the node, restarted
//     after a random part of a lease TTL, is ready and takes its
//     partitions back. A node that does not exit 0 within 30 s of SIGTERM
//     is a violation.
//
// Every reply a command gets, from its client or a resend, is recorded.
//
// # Stalls
//
// -stall-agents N (a cluster only; off unless asked for) adds N steps
// agents that write without pause (a fiber of 600 steps 400 ms apart every
// 30 s, so about four overlap and a start lost to a kill leaves the agent
// writing), followed from their events streams by stored time (stalls.go).
// Before each kill it asks each one's owner and each events stream's
// leader: an agent owned by the victim, or in a shard whose events stream
// it led, is the victim's, and so is one whose last event before the kill
// the victim wrote (handed to it since it was asked), and so is one in a
// shard whose last leader-elected advisory before the kill named the
// victim (the leader spread may move a shard to it in the instant between
// the ask and the kill; leaders.go), and so is one whose partition's last
// lease write before the kill named the victim (a warm handoff to a node
// that came back may land in that instant too, before the victim wrote
// anything of the agent; leases.go); the others are not.
// It measures each agent writing when the kill came (an event within 2 s
// before it) from the kill until 3 s after the victim was ready again (the
// partitions handed back to it, and their agents' pause, included), or the
// next kill or SIGSTOP if sooner: its longest time without a stored event
// (stalled above 1 s); and for the victim's, the kill to its first event,
// which issue 36 bounds by nats-server's election (9 s at most) plus the
// lease TTL. It reads each events stream's stall agents every 3 s while the
// run goes on (stamplog.go; one consumer a stream, kept between reads,
// stalls.Tail): agentd compacts a stall agent every 15-30 s (by its
// size), which purges the events before its snapshot, so a read once per
// kill found most agents' events from before the kill gone. A snapshot that
// covers events no read saw marks the time since the agent's last event
// read as unread, and a kill whose measure that time overlaps leaves the
// agent out (counted apart), rather than measure the hole as a stall. A
// kill's measure waits for reads of every stream that began after its end
// (45 s at most; past that the kill is not measured). It prints how many
// agent-kills it measured, the fractions stalled, the others' and the
// victim's, with PASS or MISS, and each kill that missed, with where the
// others' longest stall was: the events around it and their writers
// (another node after it: the agent moved). Stalls are figures, not
// violations; the agents' fibers are checked as the steps load's are.
//
// -agentd-flags adds flags to every node after the chart's and chaos's
// own, such as "--shards 8 --owned-views".
//
// # Checks
//
// At the end it stops the load and checks, exiting 1 when anything was
// violated:
//
//   - verify.Check over NATS, with every chat request id and steps fiber id
//     that was acknowledged (each must be in the log): among its rules, a
//     stored user message without a turn (an orphan), a user message
//     answered by two turns, a request id started twice, and a turn that
//     recorded its outcome over a stream that never reached its terminal
//     chunk;
//   - each chat agent's conversation, read as a client reads it (the
//     messages command): every command chaos sent is stored at most once
//     and every acknowledged one exactly once (by its marker), whatever
//     compaction did to the log, and no user message is answered by two
//     assistant messages;
//   - each acknowledged chat command got exactly one outcome: every reply
//     it got, however often and wherever it was sent, names the same turn
//     (request id and stream), and the agent's streams (the streams verb,
//     as a client reads them) hold exactly one stream of that request id,
//     which ended (waiting up to 90 s for turns still running when the load
//     stopped);
//   - the readers: a follower that saw chunks out of order, an acknowledged
//     chat whose stream did not reach its terminal chunk within 90 s, a
//     replay that differs from the stream;
//   - "agentd verify" as an operator runs it: on a single node, stopped
//     with SIGTERM, over its data dir (--data); on a cluster, over NATS
//     (with the admin credential, so the tenant's log too), then the nodes
//     are stopped with SIGTERM. A cluster's verify that fails only because
//     the log was purged during every one of its reads (the stall agents'
//     last fibers write, and their agents compact, for up to 4 minutes
//     after the load stops) is run again every 10 s, as operations.md
//     tells an operator to, for up to 5 minutes; any other failure counts
//     at once.
//
// It prints a table: seed, nodes, kills, stops, operations, violations,
// restart-to-ready latency (process start to /readyz answering 200) p50
// and p99, and the duration of the kills; then the operations by kind,
// verify's summary (with the user messages whose answer it checked) and
// its notes counted by kind, the conversations read (messages, user
// messages, and user messages with no assistant message after them: turns
// that failed before storing one, which verify checks have an outcome),
// a line "one turn at a time" with verify's checks of one turn per request
// and one request per turn by name (turn-overlap, turn-two-fibers,
// turn-started-twice, message-answered-twice, stream-start,
// stream-no-terminal) and what each found, with how many acknowledged chats
// were sent more than once or answered more than once; with shapes, how
// many stepdowns (and refused) and handoffs ran; and every violation. A
// follow that never ended says what the follower saw and what the stream
// holds (its first and last stored chunk, and who wrote them).
//
// Flags added to every node: --local-rate=300, and compaction every
// second (--compact-events=256 --compact-every=1s --compact-idle-events=16
// --idle-timeout=5s), so kills land on compactions too and verify reads
// snapshots.
//
// -seed fixes the schedule of kills, stepdowns and handoffs and the load's
// choices (not the timings of agentd itself); the stepdowns and handoffs
// draw from random streams of their own, so a seed kills the same nodes
// with them as without. Each event of the schedule is printed with its
// time on stderr, and each node's log marks its starts, SIGKILLs,
// SIGSTOPs, SIGCONTs and SIGTERMs. The data dirs, the nodes' logs (agentd.log, or
// forever-i.log) and verify's whole report (verify.txt) are kept when the
// run fails, or with -keep.
package main
