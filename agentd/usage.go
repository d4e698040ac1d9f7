package agentd

import (
	"context"
	"time"

	"github.com/forever-agents/forever/agentd/quota"
	"github.com/forever-agents/forever/internal/apierror"
	"github.com/nats-io/nats.go/jetstream"
)

// Usage returns what the daemon's NATS account uses of the quotas that
// count something stored (quota.Usage): a tenant's daemon reads its own
// tenant's. It waits at most clusterReadTimeout. Errors: not started yet,
// or JetStream not answering (both 503).
func (d *Daemon) Usage(ctx context.Context) (quota.Usage, error) {
	d.mu.Lock()
	nc := d.mu.nc
	d.mu.Unlock()
	if nc == nil {
		return quota.Usage{}, apierror.New(apierror.Unavailable, "agentd is starting, try again").WithRetryAfter(time.Second)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return quota.Usage{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, clusterReadTimeout)
	defer cancel()
	return quota.ReadUsage(ctx, js)
}
