package agentd

import (
	"context"
	"errors"
	"io/fs"
	"net/http"
	"path/filepath"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/forever-agents/forever/internal/apierror"
	"github.com/forever-agents/forever/ownership"
)

// ClusterInfo is what a node sees of its cluster: GET /v1/cluster, the
// NATS endpoint <prefix>.cluster (package host), and the console's cluster
// view. Every node answers with its own view: the leases and nodes its
// watch of the lease bucket holds, the moves it saw, and the streams as
// the JetStream cluster reports them. A tenant's daemon answers for the
// tenant's account: its own leases, streams and use.
type ClusterInfo struct {
	// Node is the server name of the node that answered; Cluster the NATS
	// cluster's name (empty for a single node).
	Node    string `json:"node"`
	Cluster string `json:"cluster,omitempty"`
	// Partitions is the partition count, LeaseTTL the leases' TTL.
	Partitions int    `json:"partitions"`
	LeaseTTL   string `json:"leaseTtl"`
	// Shards is the stream shard count of a cluster created with
	// --shards above 1 (each shard's events and chunks streams are in
	// Streams); absent for the unsharded layout.
	Shards int `json:"shards,omitempty"`
	// Nodes are the nodes of the lease bucket, with the partitions each
	// holds; a node taken for dead (no heartbeat for a TTL) is not live.
	Nodes []ownership.NodeInfo `json:"nodes"`
	// Leases are the partitions with a lease, in partition order; a free
	// partition is missing.
	Leases []LeaseInfo `json:"leases"`
	// Moves are the last lease moves this node saw, oldest first.
	Moves []ownership.Move `json:"moves"`
	// Streams are the events and chunks streams and the lease bucket.
	Streams []StreamUse `json:"streams"`
	// Store is what this node stores: JetStream's use of the account,
	// the views' Pebble and the data dir's disk.
	Store StoreUse `json:"store"`
	// Format is the record format the cluster writes and what each live
	// node reads (ownership's format switch); absent when it could not be
	// read.
	Format *ownership.FormatInfo `json:"format,omitempty"`
}

// RecordFormat is the highest format of stored records this release reads,
// announced to the cluster (ownership.Config.Format). A release that adds
// a kind of record raises it, and writes the new kind only once the
// cluster's active format reached it: after every node runs a release that
// reads it.
//
// It is FormatInlineEnds, past FormatShards: an unsharded cluster's
// active format passes FormatShards with it, which changes nothing there
// (the layout is the cluster's stored shard count, --shards, not its
// format), and a cluster created with shards starts at FormatShards and
// rises to it once every node reads packed chunks, end records and
// announced steps, keeps partitions with their holders, and reads a
// fiber's end inside a turn's outcome.
const RecordFormat = FormatInlineEnds

// Record formats of agentd's releases (ownership's format switch).
const (
	// FormatBlobRefs: chat payloads over --blob-threshold are stored in
	// the FOREVER_BLOBS object store and events hold their references
	// (package blob). A release before it reads a reference as an empty
	// field, so references are written only once the cluster's active
	// format reached it; until then payloads stay inline.
	FormatBlobRefs = ownership.FormatBase + 1
	// FormatBlobSweep: a node's Put of an object already stored touches
	// it (blob/meta.go), so the sweep's compare-and-set delete never
	// takes an object a Put just reused. A release before it reuses an
	// object without a touch: the sweep runs only once every node
	// touches. It adds no kind of record.
	FormatBlobSweep = ownership.FormatBase + 2
	// FormatChunkRefs: a chunk's payload over --blob-threshold (a tool's
	// input or output, a data part) is stored in FOREVER_BLOBS and the
	// chunk on FOREVER_CHUNKS holds its reference (chunk.Blobs). A
	// release before it reads such a chunk with the field empty (a
	// recovered turn would lose the output, its gateway would send none),
	// so chunks hold references only once the cluster's active format
	// reached it; until then they carry their payloads inline.
	FormatChunkRefs = ownership.FormatBase + 3
	// FormatBatches: the merge and debounce policies store a batch's
	// messages in its first message's turn.started (merged, mergedFrom).
	// A release before it reads that turn as its first message's only,
	// and recovering the batch's other queue fibers would answer their
	// messages a second time: until every node reads batches, the two
	// policies queue each message as enqueue does.
	FormatBatches = ownership.FormatBase + 4
)

// LeaseInfo is one partition's lease.
type LeaseInfo struct {
	Partition int    `json:"partition"`
	Node      string `json:"node"`
	Epoch     uint64 `json:"epoch"`
}

// StreamUse is one JetStream stream as its leader reports it. Sequences
// are strings of digits, as every cursor on the wire. Error is set, and
// the rest zero, when the stream did not answer (no leader: an election,
// or no quorum).
type StreamUse struct {
	Name      string     `json:"name"`
	Messages  uint64     `json:"messages"`
	Bytes     uint64     `json:"bytes"`
	FirstSeq  string     `json:"firstSeq"`
	LastSeq   string     `json:"lastSeq"`
	Consumers int        `json:"consumers"`
	Replicas  int        `json:"replicas"`
	Leader    string     `json:"leader,omitempty"`
	Peers     []PeerInfo `json:"peers,omitempty"`
	Error     string     `json:"error,omitempty"`
}

// PeerInfo is a replica of a stream other than its leader.
type PeerInfo struct {
	Name    string `json:"name"`
	Current bool   `json:"current"`
	Offline bool   `json:"offline,omitempty"`
	// Lag is how many operations it is behind; Active how long ago it
	// was last heard from.
	Lag    uint64 `json:"lag"`
	Active string `json:"active"`
}

// StoreUse is what a node stores.
type StoreUse struct {
	// JetStream is the account's use and limits (-1: none), over the
	// cluster; Error is set when it did not answer.
	JetStream struct {
		Memory     uint64 `json:"memory"`
		Storage    uint64 `json:"storage"`
		Streams    int    `json:"streams"`
		Consumers  int    `json:"consumers"`
		MaxMemory  int64  `json:"maxMemory"`
		MaxStorage int64  `json:"maxStorage"`
		Error      string `json:"error,omitempty"`
	} `json:"jetstream"`
	// ViewsBytes is the size of this node's Pebble views.
	ViewsBytes int64 `json:"viewsBytes"`
	// DiskBytes and DiskFreeBytes are the data dir's filesystem (0 when
	// unknown).
	DiskBytes     uint64 `json:"diskBytes"`
	DiskFreeBytes uint64 `json:"diskFreeBytes"`
}

// clusterReadTimeout bounds each JetStream read of ClusterInfo: a stream
// without a leader (an election, a lost quorum) is reported, not waited
// for.
const clusterReadTimeout = 2 * time.Second

// ClusterInfo returns this node's view of its cluster. It answers while a
// stream has no leader (that stream's Error says so). Errors: not started
// yet (an *apierror.Error, 503).
func (d *Daemon) ClusterInfo(ctx context.Context) (ClusterInfo, error) {
	d.mu.Lock()
	nc := d.mu.nc
	d.mu.Unlock()
	mgr := d.parts.ready.Load()
	if nc == nil || mgr == nil {
		return ClusterInfo{}, apierror.New(apierror.Unavailable, "agentd is starting, try again").WithRetryAfter(time.Second)
	}
	info := ClusterInfo{
		Node: mgr.Node(), Cluster: nc.ConnectedClusterName(), Partitions: mgr.Partitions(), LeaseTTL: mgr.TTL().String(),
		Shards: mgr.Shards(),
		Nodes:  mgr.NodeInfos(), Moves: mgr.Moves(), Leases: []LeaseInfo{}, Streams: []StreamUse{},
	}
	if info.Moves == nil {
		info.Moves = []ownership.Move{}
	}
	for _, l := range mgr.Leases() {
		info.Leases = append(info.Leases, LeaseInfo{Partition: l.Partition, Node: l.Node, Epoch: l.Epoch})
	}
	fctx, cancel := context.WithTimeout(ctx, clusterReadTimeout)
	if f, err := mgr.Formats(fctx); err == nil {
		info.Format = &f
	}
	cancel()
	js, err := jetstream.New(nc)
	if err != nil {
		return info, err
	}
	for _, name := range append(logStreams(mgr.Shards()), "KV_"+ownership.DefaultBucket) {
		info.Streams = append(info.Streams, streamUse(ctx, js, name))
	}
	actx, cancel := context.WithTimeout(ctx, clusterReadTimeout)
	ai, err := js.AccountInfo(actx)
	cancel()
	st := &info.Store.JetStream
	if err != nil {
		st.Error = "the account's JetStream use did not answer: " + err.Error()
	} else {
		st.Memory, st.Storage, st.Streams, st.Consumers = ai.Memory, ai.Store, ai.Streams, ai.Consumers
		st.MaxMemory, st.MaxStorage = ai.Limits.MaxMemory, ai.Limits.MaxStore
	}
	info.Store.ViewsBytes = dirSize(d.cfg.PebbleDir())
	info.Store.DiskBytes, info.Store.DiskFreeBytes = diskUsage(d.cfg.DataDir)
	return info, nil
}

// streamUse reads one stream's info, or says why it could not.
func streamUse(ctx context.Context, js jetstream.JetStream, name string) StreamUse {
	u := StreamUse{Name: name}
	ctx, cancel := context.WithTimeout(ctx, clusterReadTimeout)
	defer cancel()
	s, err := js.Stream(ctx, name)
	var si *jetstream.StreamInfo
	if err == nil {
		si, err = s.Info(ctx)
	}
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
		u.Error = "not created yet"
		return u
	case err != nil:
		u.Error = "did not answer (no leader?): " + err.Error()
		return u
	}
	u.Messages, u.Bytes, u.Consumers = si.State.Msgs, si.State.Bytes, si.State.Consumers
	u.FirstSeq, u.LastSeq = strconv.FormatUint(si.State.FirstSeq, 10), strconv.FormatUint(si.State.LastSeq, 10)
	u.Replicas = si.Config.Replicas
	if c := si.Cluster; c != nil {
		u.Leader = c.Leader
		for _, p := range c.Replicas {
			u.Peers = append(u.Peers, PeerInfo{Name: p.Name, Current: p.Current, Offline: p.Offline, Lag: p.Lag,
				Active: p.Active.Round(time.Millisecond).String()})
		}
	}
	return u
}

// dirSize sums the sizes of the files under dir (0 when it cannot be
// read).
func dirSize(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, e fs.DirEntry, err error) error {
		if err != nil {
			return nil // a file removed meanwhile (a compaction): skip it
		}
		if e.Type().IsRegular() {
			if fi, err := e.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}

// handleCluster serves GET /v1/cluster: ClusterInfo as JSON, errors as
// {"code","error"}.
func (d *Daemon) handleCluster(w http.ResponseWriter, r *http.Request) {
	info, err := d.ClusterInfo(r.Context())
	if err != nil {
		e := apierror.From(err)
		if e.Code == apierror.Internal {
			d.logger.Warn("cluster info", "err", err)
		}
		e.WriteHTTP(w)
		return
	}
	writeJSON(w, http.StatusOK, info)
}

// ClusterHandler serves ClusterInfo as GET /v1/cluster does: package
// tenancy serves it to the admin token under auth, where /v1/ belongs to
// the tenants.
func (d *Daemon) ClusterHandler() http.Handler { return http.HandlerFunc(d.handleCluster) }
