// Package ownership decides which node of a cluster serves which agents.
//
// Agents hash to a fixed number of partitions (PartitionOf). A node serves a
// partition while it holds the partition's lease: a key lease.<p> in a
// replicated JetStream KV bucket (FOREVER_LEASES) written with a per-key TTL
// (ADR-48). The bucket is in JetStream's memory store, where the agents'
// data filling the file store cannot stop renewals (bucket.go). The
// lease's epoch counts the partition's acquisitions (1, 2, 3, ...; key
// epoch.<p> of the partitions bucket, on file storage, see epoch.go); the
// holder renews by compare-and-set on the key's current revision, so a
// renewal of a lease somebody else took fails instead of overwriting it.
//
// Every node keeps a node.<name> key alive with the same TTL. The live nodes
// split the partitions by a balanced rendezvous assignment that every node
// computes alike (assign.go): each node owns at most ceil(P/N). From the
// record format Config.KeepFormat on, the assignment first keeps every
// partition with its live holder below that bound, so a node leaving
// moves only its own partitions, none between two nodes that stay
// (TestAssignKeepingMovesOnlyTheLeaversShare,
// TestPlanKeepsPartitionsWhenANodeLeaves); it switches on through the
// format because nodes assigning by two rules would hand partitions back
// and forth. A node
// acquires the free partitions assigned to it (up to 16 acquisitions in
// flight at once, so a restarted node takes its 64 partitions in the time
// of a few), and hands off the partitions assigned to another live node:
// it cancels the partition's context, waits for what runs under it to
// stop, and deletes the key, so the new owner acquires it at once. A
// partition goes only to a node seen alive for a renewal period (a node
// that flaps does not drag partitions back and forth), or at once to a
// node that restarted under its name (its key announces another start,
// or came back after it went) when its last process was seen
// heartbeating or stopped in order (incarnation.go); the restart of a
// node whose last process died before it heartbeat twice waits a renewal
// period again (TestRestartOfAStableNodeIsDueAtOnce). A handoff is warm
// (warm.go): the receiver prepares each partition coming to it
// (Config.Prepare; agentd catches its views up) and announces it in its
// node key, and the holder hands the partition off once it is announced,
// or WarmWait after it was due (TestWarmHandoff, TestWarmWaitBound); a
// node that announces nothing is handed its partitions at once
// (TestHandoffToANodeThatAnnouncesNothing). The
// check between rounds (every twentieth of a TTL) hands a partition off
// once it is due, rather than the next round (TestHandoffDueBetweenRounds). On
// Run's exit every partition is handed off, so a rolling restart never
// waits for a TTL; first the node drains (drain.go): it announces it is
// leaving, the others prepare its partitions, and each goes warm, for up
// to DrainWait (TestDrainHandsOffWarm, TestDrainBound, TestNoDrainAlone,
// TestDrainToAnEarlierRelease).
//
// Invariants:
//
//   - At most one node holds a partition's lease at any instant: every write
//     of a lease key is a compare-and-set on its revision.
//   - A node stops serving a partition before anybody else can acquire it: a
//     lease is valid on the holder until TTL minus Margin after its last
//     successful renewal was sent, measured on the holder's monotonic clock,
//     while another node takes it over only once it saw no renewal for a
//     TTL, and the key expires on the server TTL plus ElectionGrace after
//     that renewal landed. A node that was stopped (SIGSTOP, a long GC
//     pause) finds its leases expired when it resumes, before it writes
//     anything: Owned checks the deadline on every call.
//   - A lease outlives its bucket's leader election (the election grace).
//     While the bucket has no leader nobody can write it, so nobody can take
//     a lease either. A holder whose renewals fail without a conflict keeps
//     serving past its deadline, for at most ElectionGrace, while it retries
//     them every tenth of a renewal period on a live connection; the first
//     that lands after the election renews the same lease (same epoch, the
//     partition never stopped: TestLeaseOutlivesBucketElection), or
//     conflicts and the lease is lost. The other nodes judge nothing stale
//     while their watch is silent and for a renewal period after it
//     delivers again, by when a live holder was seen renewing; a dead
//     holder's leases are taken over then, within the election plus a TTL.
//     So the leader of the lease bucket dying stops only the partitions of
//     the node that died, not every node's. The grace holds only on fresh
//     evidence: a process stopped meanwhile sent no retry and finds its
//     lease expired (TestStoppedHolderRefusedOnGrace), as does one whose
//     connection is down (TestExpiryBeforeTakeover).
//   - What the grace gives up, and why one writer per agent still holds: a
//     holder whose NATS server is cut off from the bucket's quorum while
//     the other nodes reach it (a network partition between servers) can
//     serve up to ElectionGrace minus Margin after another node took the
//     lease over. Its writes stay fenced by the event log: every append
//     expects the agent's last subject sequence and carries the lease's
//     epoch, so once the new owner wrote, the old owner's next append fails
//     (eventlog.ErrFenced) and the log never interleaves two writers; on
//     the minority side of a partition its appends to the R3 streams fail
//     anyway, for want of a quorum.
//   - The partition context handed to Serve is cancelled, with a cause,
//     whenever the lease is lost, expires or is handed off; Serve's return is
//     awaited before a handed-off key is deleted.
//   - Along the leases that serve a partition, epochs only grow: an
//     acquisition serves only after it moved the partition's epoch counter,
//     by a compare-and-set on the revision it read before writing its
//     lease, to its epoch (TestEpochCountedMeanwhile; TestEpochsAfterUpgrade
//     for a cluster whose epochs were revisions before). The counters are
//     on file storage: the lease bucket lost (a whole cluster stopped, an
//     operator deleting it) keeps them.
//   - The partition count is stored in the bucket (config.partitions) when
//     the cluster first starts; a node started with another count gets
//     ErrPartitionMismatch and does not start.
//
// A bucket deleted or purged under a running node is restored with
// RestoreBucket (agentd's store guard calls it): the node stops serving at
// once, and takes no lease for one TTL, by when no node can still serve a
// lease of the lost bucket; epochs go on above the old ones.
//
// A key whose value does not parse (a stray write on it) is repaired, not
// left a partition nobody serves: a garbled epoch counter is overwritten
// by the next acquisition with an epoch above any it may have counted
// (TestGarbledEpochRepaired); a garbled lease key fails its holder's next
// renewal and is deleted a TTL after its write, then the partition is
// acquired again (TestGarbledLeaseRepaired).
//
// What a node sees of the bucket is readable for operators (the console's
// cluster view, GET /v1/cluster): Leases (every partition's holder and
// epoch), NodeInfos (the nodes, live or taken for dead, and what each
// holds) and Moves (the last 256 changes of holder this node's watch saw,
// a handoff showing as a release then an acquisition; the leases found at
// start and renewals are no moves).
//
// Record formats (format.go): each node announces in its node key the
// highest format of stored records its release reads (Config.Format). The
// cluster's active format, kept in the partitions bucket, is raised by
// Activate only once every live node reads it, and never goes back; a node
// that cannot read the active format does not start (ErrFormatTooNew), and
// a running one that finds it raised stops serving. A release that adds a
// kind of record reads it at once and writes it once the format is active,
// so a rolling upgrade brings it in one release.
//
// The lease only says who should write. Writes themselves are fenced by the
// event log (eventlog.Owner): the epoch goes into every append's writer
// headers and every append expects the agent's last subject sequence, so a
// stale holder whose clock lied still cannot write after the new owner.
package ownership
