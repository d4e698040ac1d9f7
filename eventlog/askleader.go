package eventlog

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Asking a stream's leader through the JetStream API (a message get, the
// stream's info): in a cluster every server takes the request and only
// the stream's leader answers it. While the leader is lost and its
// followers have not noticed yet (until their election timeout, 4-9 s,
// longer on a loaded node) no server answers at all, nor says why: the
// request is dropped. (Once they noticed, they answer that JetStream is
// temporarily unavailable, 10008, which the caller gets at once, as any
// answer.) Waiting for that first request until the caller's deadline (a
// command's 30 s, a settle's minute) made a read the next leader answers
// within the election wait the whole deadline, and a fenced append hold
// its agent's fence all along.
//
// So a request unanswered after leaderAskEvery is sent again beside it,
// and again each leaderAskEvery, each waiting up to leaderAskMax, until
// the caller's deadline (Config.AckTimeout when it has none); the first
// answer is taken. A leader elected while asks are in flight is heard
// within leaderAskEvery. Asks once waited 1, 2 then 4 s each, one at a
// time: a new owner's views asked a shard's info with the library's 5 s
// and heard the shard's new leader 1.5 s after it was elected (a 6-node
// chaos run, stop 62). A slow leader's answer is not lost to an ask
// given up: each waits leaderAskMax.
const (
	leaderAskEvery = time.Second
	leaderAskMax   = 4 * time.Second
)

// askLeader sends the JetStream API request body to subject and returns
// the answer, asking again while no server answers (see above).
// Errors: nats.go's, or the context's once its deadline (or
// Config.AckTimeout) passed without an answer.
func (l *Log) askLeader(ctx context.Context, subject string, body []byte) (*nats.Msg, error) {
	ctx, cancel, _ := l.bound(ctx)
	defer cancel()
	return askUntilAnswered(ctx, l.metrics.leaderAsks.Inc, func(actx context.Context) (*nats.Msg, error) {
		return l.nc.RequestWithContext(actx, subject, body)
	})
}

// streamInfo reads stream's info from its leader, asking again while no
// server answers, as askLeader does.
func (l *Log) streamInfo(ctx context.Context, stream string) (*jetstream.StreamInfo, error) {
	ctx, cancel, _ := l.bound(ctx)
	defer cancel()
	st := l.stream(stream)
	return askUntilAnswered(ctx, l.metrics.leaderAsks.Inc, func(actx context.Context) (*jetstream.StreamInfo, error) {
		return st.Info(actx)
	})
}

// askUntilAnswered calls ask now, and again beside the calls in flight
// every leaderAskEvery (counting each in again) while none has answered,
// each call bounded by leaderAskMax, and returns the first answer: a
// result, or an error other than an unanswered ask. It returns ctx's
// error when ctx ends first.
func askUntilAnswered[T any](ctx context.Context, again func(), ask func(context.Context) (T, error)) (T, error) {
	type answer struct {
		v   T
		err error
	}
	actx, cancel := context.WithCancel(ctx)
	defer cancel() // ends the asks still in flight
	answers := make(chan answer)
	inFlight := 0
	send := func() {
		inFlight++
		go func() {
			cctx, ccancel := context.WithTimeout(actx, leaderAskMax)
			v, err := ask(cctx)
			ccancel()
			select {
			case answers <- answer{v, err}:
			case <-actx.Done():
			}
		}()
	}
	send()
	tick := time.NewTicker(leaderAskEvery)
	defer tick.Stop()
	for {
		select {
		case a := <-answers:
			inFlight--
			if ctx.Err() != nil {
				var zero T
				return zero, ctx.Err()
			}
			if a.err == nil || !unansweredAsk(a.err) {
				return a.v, a.err
			}
			if inFlight == 0 {
				// Every ask gave up: ask again at once.
				again()
				send()
			}
		case <-tick.C:
			again()
			send()
		case <-ctx.Done():
			var zero T
			return zero, ctx.Err()
		}
	}
}

// unansweredAsk reports whether a request's err says only that no answer
// came in time.
func unansweredAsk(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout)
}
