package host

import (
	"context"
	"time"

	"github.com/forever-agents/forever/internal/backoff"
)

// warmPartition gets this node ready for partition p before it owns it
// (agentd.IncomingFunc, a warm handoff): with owned views it follows p's
// views and waits for them to catch p up, then calls warm, and follows p
// until ctx ends; servePartition, if this node acquires p meanwhile,
// then finds p's views caught up but for the holder's last events. A node
// whose views hold every partition is warm at once.
func (h *Host) warmPartition(ctx context.Context, p int, warm func()) {
	if h.followPartition(p) {
		defer func() { _ = h.deps.Log.UnfollowPartition(p) }()
		start := time.Now()
		// WaitPartition waits for the views' Follower to be ready first.
		for attempt := 0; h.deps.Views.WaitPartition(ctx, p) != nil; attempt++ {
			select {
			case <-time.After(backoff.Exp(100*time.Millisecond, 5*time.Second, attempt)):
			case <-ctx.Done():
				return
			}
		}
		h.logger.Debug("partition warm before its handoff", "partition", p, "took", time.Since(start))
	}
	warm()
	<-ctx.Done()
}
