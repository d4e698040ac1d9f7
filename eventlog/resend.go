package eventlog

import (
	"context"
	"errors"

	"github.com/nats-io/nats.go"
)

// errReconnected is the cause of an attempt of resent's that the
// connection's reconnection cut short.
var errReconnected = errors.New("eventlog: the connection reconnected while the request waited")

// maxResends bounds how often resent sends a request again.
const maxResends = 3

// resent runs req, a JetStream API request that may be sent twice with
// the same effect (a purge of a subject up to a sequence, the delete of a
// message), bounded by l.bound, and sends it again at once when the
// connection reconnected while it waited: an answer written to the
// connection that went away (reset, or closed by the server as a slow
// consumer on a loaded machine) is lost for good, and req would wait out
// its whole bound, Config.AckTimeout, to fail (TestPurgeSurvivesReconnect;
// TestHugeAnswerStoredWhole's compaction did once at load 38). req gets
// the attempt's context; its error is returned as it is.
func (l *Log) resent(ctx context.Context, req func(ctx context.Context) error) error {
	for attempt := 0; ; attempt++ {
		bctx, cancel, _ := l.bound(ctx)
		actx, cut := context.WithCancelCause(bctx)
		back := l.nc.StatusChanged(nats.CONNECTED)
		watched := make(chan struct{})
		go func() {
			defer close(watched)
			select {
			case _, ok := <-back:
				if ok {
					cut(errReconnected)
				}
			case <-actx.Done():
			}
		}()
		err := req(actx)
		reconnected := errors.Is(context.Cause(actx), errReconnected)
		cut(nil)
		<-watched
		l.nc.RemoveStatusListener(back)
		cancel()
		if err == nil || !reconnected || ctx.Err() != nil || attempt == maxResends {
			return err
		}
		l.logger.Warn("the connection reconnected while a request waited; sending it again", "attempt", attempt+1)
	}
}
