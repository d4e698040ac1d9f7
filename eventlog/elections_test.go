package eventlog_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/eventlog/eventlogtest"
)

// TestWriteEndsWhenItsStreamElects: a write whose stream elects a leader
// while its answer is awaited (a leader's stepdown drops the proposals it
// had not committed, and nobody answers them) does not wait out the ack
// timeout: a fenced one ends unconfirmed, for the fence to resolve, and
// one with a message id is sent again and takes the answer to the copy.
// The answers are withheld by a subscriber of the write's subject; the
// election is a real stepdown of the stream's leader on a 3-node cluster.
// Without the advisories followed, both waited the ack timeout (an hour
// here, 5 s by default: an agent of a shard whose leader was moved
// stalled 4.9 s in a 6-node chaos run).
func TestWriteEndsWhenItsStreamElects(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	srvs := eventlogtest.RunCluster(t, 3)
	lg := eventlogtest.OpenOn(t, srvs[0], eventlog.Config{Replicas: 3, AckTimeout: time.Hour})
	nc := eventlogtest.Connect(t, srvs[0])
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ls, err := eventlog.ReadStreams(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	stream := ls.EventsOf("x")
	withheld, err := nc.SubscribeSync("test.withheld")
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	for _, fenced := range []bool{true, false} {
		type result struct {
			seq eventlog.Seq
			err error
		}
		done := make(chan result, 1)
		go func() {
			seq, err := eventlog.PublishUnanswered(context.WithoutCancel(ctx), lg, stream, "test.withheld", fenced)
			done <- result{seq, err}
		}()
		if _, err := withheld.NextMsgWithContext(ctx); err != nil {
			t.Fatalf("the write was not sent: %v", err)
		}
		stepDown(ctx, t, nc, stream)
		if !fenced {
			// Sent again after the election: answer the copy.
			m, err := withheld.NextMsgWithContext(ctx)
			if err != nil {
				t.Fatalf("the write with a message id was not sent again after the election: %v", err)
			}
			if err := m.Respond([]byte(`{"stream":"` + stream + `","seq":7}`)); err != nil {
				t.Fatal(err)
			}
		}
		select {
		case r := <-done:
			switch {
			case fenced && !errors.Is(r.err, eventlog.ErrUnconfirmed):
				t.Errorf("fenced write across the election: %v; want ErrUnconfirmed", r.err)
			case fenced && !strings.Contains(r.err.Error(), "elected a leader"):
				t.Errorf("fenced write across the election: %v; want it to say the stream elected a leader", r.err)
			case !fenced && r.err != nil:
				t.Errorf("write with a message id across the election: %v; want the copy's answer", r.err)
			}
		case <-ctx.Done():
			t.Fatalf("write (fenced %v) still waiting after its stream elected a leader", fenced)
		}
	}
}

// stepDown asks stream's leader to step down, and checks it agreed.
func stepDown(ctx context.Context, t *testing.T, nc *nats.Conn, stream string) {
	t.Helper()
	resp, err := nc.RequestWithContext(ctx, "$JS.API.STREAM.LEADER.STEPDOWN."+stream, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(resp.Data), `"success":true`) {
		t.Fatalf("stepdown of %s: %s", stream, resp.Data)
	}
}
