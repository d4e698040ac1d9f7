package eventlog

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/forever-agents/forever/internal/backoff"
)

// Asking a stream's leader through the JetStream API (a message get): in
// a cluster every server takes the request and only the stream's leader
// answers it. While the leader is lost and its followers have not noticed
// yet (until their election timeout, 4-9 s, longer on a loaded node) no
// server answers at all, nor says why: the request is dropped. (Once they
// noticed, they answer that JetStream is temporarily unavailable, 10008,
// which the caller gets at once, as any answer.) Waiting for that first
// request until the caller's deadline (a command's 30 s, a settle's
// minute) made a read the next leader answers within the election wait
// the whole deadline, and a fenced append hold its agent's fence all
// along. So each request waits a short while, growing from leaderAskFirst
// to leaderAskMax, and one unanswered is sent again (a read changes
// nothing) until the caller's deadline, or Config.AckTimeout when it has
// none.
const (
	leaderAskFirst = time.Second
	leaderAskMax   = 4 * time.Second
)

// askLeader sends the JetStream API request body to subject and returns
// the answer, asking again while no server answers (see above).
// Errors: nats.go's, or the context's once its deadline (or
// Config.AckTimeout) passed without an answer.
func (l *Log) askLeader(ctx context.Context, subject string, body []byte) (*nats.Msg, error) {
	ctx, cancel, _ := l.bound(ctx)
	defer cancel()
	for n := 1; ; n++ {
		actx, acancel := context.WithTimeout(ctx, backoff.Exp(leaderAskFirst, leaderAskMax, n))
		resp, err := l.nc.RequestWithContext(actx, subject, body)
		acancel()
		if err == nil || ctx.Err() != nil || !unansweredAsk(err) {
			return resp, err
		}
		l.metrics.leaderAsks.Inc()
	}
}

// unansweredAsk reports whether a request's err says only that no answer
// came in time.
func unansweredAsk(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout)
}
