package chathost

import (
	"context"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/forever-agents/forever/agentd"
	"github.com/forever-agents/forever/blob"
)

// openBlobs opens the FOREVER_BLOBS Object Store bucket the chat payloads
// over --blob-threshold go to, and gives the read side its references to
// resolve. A negative threshold stores every payload inline; the bucket is
// still opened so that what an earlier configuration stored reads back.
// It adds the references view (blob.RefsView) to the views, and the blob
// sweeper to d unless --blob-grace is negative: only the owner of
// partition 0 sweeps (any node could: two sweeps at once are safe).
func (ct *Type) openBlobs(ctx context.Context, d *agentd.Daemon, deps *agentd.Deps) error {
	if err := deps.Views.Add(blob.RefsView()); err != nil {
		return err
	}
	js, err := jetstream.New(deps.Conn)
	if err != nil {
		return err
	}
	var bs *blob.Store
	err = agentd.RetryQuorum(ctx, deps.Logger, "blob bucket", deps.Config.Replicas, func(ctx context.Context) (err error) {
		bs, err = blob.Open(ctx, js, blob.Config{Replicas: deps.Config.Replicas, Storage: jetstream.FileStorage})
		return err
	})
	if err != nil {
		return err
	}
	ct.store.SetBlobs(bs)
	ct.blobs, ct.blobTh = bs, deps.Config.BlobThreshold
	if own := deps.Ownership; own != nil {
		// A node of the previous release would read a reference as an
		// empty field: references wait until every node reads them.
		ct.refsWritable = func() bool { return own.ActiveFormat() >= agentd.FormatBlobRefs }
		// So would it read a chunk holding a reference: chunks carry
		// their payloads until every node reads those.
		ct.chunkRefsWritable = func() bool { return own.ActiveFormat() >= agentd.FormatChunkRefs }
	}
	if deps.Config.BlobGrace >= 0 {
		sweeps := func() bool { return true }
		if own := deps.Ownership; own != nil {
			// One node sweeps (partition 0's owner), and only once every
			// node touches an object it reuses (a release before would
			// reuse one the sweep is about to delete).
			// Not with owned views: the node's references view holds its
			// own partitions' only (to come: a sweep that asks every node).
			sweeps = func() bool {
				_, _, ok := own.Owned(0)
				return ok && own.ActiveFormat() >= agentd.FormatBlobSweep && !deps.Log.OwnedViews()
			}
		}
		ct.sweeper, err = blob.NewSweeper(blob.SweeperConfig{
			Store: bs, Log: deps.Log, Views: deps.Views, Grace: deps.Config.BlobGrace, Sweeps: sweeps,
			Logger: deps.Logger, Registerer: deps.Registerer, TracerProvider: deps.Config.TracerProvider,
		})
		if err != nil {
			return err
		}
		if err := d.Add("blob sweeper", ct.sweeper); err != nil {
			return err
		}
	}
	if ct.blobTh < 0 {
		ct.blobs = nil // new payloads inline
	}
	return nil
}

// inlineLimit is the largest payload stored by reference a messages page
// of budget bytes reads back; a larger one stays its reference
// ({"blobs":{"output":{"digest","size"}}}), to be read from the
// FOREVER_BLOBS bucket by the digest's hex.
func inlineLimit(budget int) int64 { return int64(budget / 2) }
