package eventlog

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// ensureStream makes the stream of cfg exist with cfg's settings: a stream
// whose config already holds every field cfg sets is only looked up;
// otherwise it is created or updated. Every node's start used to update
// each of the log's streams (2K+2 of them on a sharded log, K shards of
// each kind): each update is a proposal to the meta leader, answered only
// after the stream's own Raft group applied it, which competed with the
// elections of a cluster that had just lost a node. A lookup is answered
// by the stream's leader. A lookup that fails for another reason than a
// missing stream falls back to the create-or-update, as before.
func ensureStream(ctx context.Context, js jetstream.JetStream, cfg jetstream.StreamConfig) (jetstream.Stream, error) {
	st, err := lookupStream(ctx, js, cfg.Name)
	if err == nil && configHolds(st.CachedInfo().Config, cfg) {
		return st, nil
	}
	return js.CreateOrUpdateStream(ctx, cfg)
}

// lookupTry bounds lookupStream's first request; each next one gets
// twice as long.
const lookupTry = 500 * time.Millisecond

// lookupDefault bounds lookupStream under a ctx without a deadline: the
// jetstream package's own default for a request.
const lookupDefault = 5 * time.Second

// lookupStream looks the stream up as js.Stream does, sending the request
// again while none is answered, each try twice as long as the one before,
// until ctx ends (or jetstream's default request timeout, when ctx has no
// deadline); one answered unavailable (10008: the cluster without a meta
// leader) is asked again when its try's time is up. Only the stream's
// leader answers a lookup: a stream whose leader's node was just killed
// has none until its other peers elect one, 4-9 s later, and a request
// sent before that is lost. Sent once, it
// held a restarted node's start until its attempt's end (3 s, twice in a
// row in the chaos runs: restarts ready in 7.1 s where the election took
// less); sent again, it is answered soon after the election.
func lookupStream(ctx context.Context, js jetstream.JetStream, name string) (jetstream.Stream, error) {
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(lookupDefault)
	}
	for try := lookupTry; ; try *= 2 {
		end := time.Now().Add(try)
		if deadline.Before(end) {
			end = deadline
		}
		tctx, cancel := context.WithDeadline(ctx, end)
		st, err := js.Stream(tctx, name)
		cancel()
		if err == nil || ctx.Err() != nil || !time.Now().Before(deadline) {
			return st, err
		}
		switch {
		case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout):
		case Unavailable(err):
			// Answered at once that JetStream cannot answer now (10008
			// while the meta layer has no quorum, no responders): asked
			// again once this try's time is up, not in a tight loop.
			select {
			case <-ctx.Done():
				return st, err
			case <-time.After(time.Until(end)):
			}
		default:
			return st, err
		}
	}
}

// configHolds reports whether have, a stream's config as the server holds
// it, has every field of want that want sets (its JSON form, keys and
// values, a metadata key the server adds aside). A field the server fills
// with a default that differs from want's zero value makes it false: the
// caller then updates, as it did before it looked.
func configHolds(have, want jetstream.StreamConfig) bool {
	var h, w any
	if !roundTrip(have, &h) || !roundTrip(want, &w) {
		return false
	}
	return holds(h, w)
}

func roundTrip(v any, out *any) bool {
	b, err := json.Marshal(v)
	return err == nil && json.Unmarshal(b, out) == nil
}

// holds reports whether have contains want: every key of a wanted object
// holds in have's, and anything else is equal, a wanted 0 matching the -1
// the server stores for a limit left unset (max_bytes, max_msgs,
// max_consumers and the like).
func holds(have, want any) bool {
	wm, ok := want.(map[string]any)
	if !ok {
		return reflect.DeepEqual(have, want) || (want == 0.0 && have == -1.0)
	}
	hm, ok := have.(map[string]any)
	if !ok {
		return false
	}
	for k, wv := range wm {
		hv, ok := hm[k]
		if !ok || !holds(hv, wv) {
			return false
		}
	}
	return true
}
