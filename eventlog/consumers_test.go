package eventlog_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/eventlog/eventlogtest"
	"github.com/forever-agents/forever/internal/waitfor"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestReadsLeaveNoConsumers: every Read and Follow runs on an ordered
// consumer of its own, and nats-server 2.15 caps a stream at 1,000
// consumers unless the stream sets a limit. A consumer left behind after
// its read lives until its inactivity threshold (the client library's
// 5 minutes), so more than 1,000 reads in 5 minutes failed with
// "maximum consumers limit reached". Each read deletes its consumer. The
// stream's cap is 100 here, so 120 reads show it.
func TestReadsLeaveNoConsumers(t *testing.T) {
	lg, _ := eventlogtest.Open(t, eventlog.Config{MaxConsumers: 100})
	appendN(t, lg, 3, 1)
	for i := range 120 {
		evs, err := lg.Read(t.Context(), eventlog.Filter{Agent: "agent0"}, 0, 0)
		if err != nil {
			t.Fatalf("read %d: %v", i, err)
		}
		if len(evs) != 3 {
			t.Fatalf("read %d: %d events, want 3", i, len(evs))
		}
	}
}

// TestMaxConsumers: Config.MaxConsumers caps each stream's consumers, so
// an operator can raise nats-server's default of 1,000 concurrent follows;
// a follow over the cap ends with the server's error, and reopening with
// another cap updates the streams in place.
func TestMaxConsumers(t *testing.T) {
	lg, s := eventlogtest.Open(t, eventlog.Config{MaxConsumers: 2})
	appendN(t, lg, 3, 1)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	started := make(chan error, 3)
	for range 3 {
		go func() {
			for _, err := range lg.Follow(ctx, eventlog.Filter{Agent: "agent0"}, 0) {
				started <- err
				if err != nil {
					return
				}
				<-ctx.Done()
				return
			}
		}()
	}
	var refused int
	for range 3 {
		if err := <-started; err != nil {
			if !strings.Contains(err.Error(), "maximum consumers") || !errors.Is(err, eventlog.ErrConsumerLimit) {
				t.Fatalf("follow over the cap: %v", err)
			}
			refused++
		}
	}
	if refused != 1 {
		t.Fatalf("%d of 3 follows refused with a cap of 2, want 1", refused)
	}
	cancel()
	again := eventlogtest.OpenOn(t, s, eventlog.Config{MaxConsumers: 5000})
	info, err := eventlog.StreamConfig(again, eventlog.DefaultChunksStream)
	if err != nil {
		t.Fatal(err)
	}
	if info.MaxConsumers != 5000 {
		t.Fatalf("chunks stream MaxConsumers %d after reopening with 5000", info.MaxConsumers)
	}
}

// TestTimedOutReadIsUnavailable: a read writes nothing, so a read that
// JetStream did not answer in time says ErrUnavailable (retry; agentd's
// 503), not a bare deadline (agentd's 500). A command that read the
// agent's last sequence while its stream elected a leader got 500.
func TestTimedOutReadIsUnavailable(t *testing.T) {
	lg, _ := eventlogtest.Open(t, eventlog.Config{})
	appendN(t, lg, 3, 1)
	ctx, cancel := context.WithDeadline(t.Context(), time.Now())
	defer cancel()
	f := eventlog.Filter{Agent: "agent0"}
	_, err1 := lg.LastSeq(ctx, f)
	_, _, err2 := lg.Last(ctx, f)
	_, _, err3 := lg.Next(ctx, f, 0)
	_, err4 := lg.Read(ctx, f, 0, 0)
	for i, err := range []error{err1, err2, err3, err4} {
		if !eventlog.Unavailable(err) || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("read %d: %v, want ErrUnavailable wrapping the deadline", i+1, err)
		}
	}
	cctx, ccancel := context.WithCancel(t.Context())
	ccancel()
	if _, err := lg.LastSeq(cctx, f); eventlog.Unavailable(err) {
		t.Errorf("cancelled read: %v, want no ErrUnavailable: the caller gave up", err)
	}
}

// TestCheckFollow: with every consumer a stream allows in use, CheckFollow
// says ErrConsumerLimit before a follow is tried (a chat then answers
// 429, not an empty stream), and says nothing once one ends.
func TestCheckFollow(t *testing.T) {
	lg, _ := eventlogtest.Open(t, eventlog.Config{MaxConsumers: 1})
	f := eventlog.Filter{Agent: "agent0", Stream: "s1", Chunks: true}
	if err := lg.CheckFollow(t.Context(), f); err != nil {
		t.Fatalf("check with no consumer: %v", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range lg.Follow(ctx, f, 0) {
			return
		}
	}()
	waitCheck := func(want error) {
		t.Helper()
		// The follower's consumer is deleted in the background when it
		// ends (dropConsumer); on a loaded machine that takes seconds.
		waitfor.NoError(t, func() error {
			err := lg.CheckFollow(t.Context(), f)
			if errors.Is(err, want) || (want == nil && err == nil) {
				return nil
			}
			return fmt.Errorf("check %v, have %v", want, err)
		})
	}
	waitCheck(eventlog.ErrConsumerLimit)
	cancel()
	<-done
	waitCheck(nil)
}

// BenchmarkCheckFollow: a check that reads (the stream's limit of one
// consumer leaves no headroom to keep) against one that passes on the
// headroom an earlier read found.
func BenchmarkCheckFollow(b *testing.B) {
	for _, c := range []struct {
		name string
		max  int
	}{{"read", 1}, {"headroom", 0}} {
		b.Run(c.name, func(b *testing.B) {
			lg, _ := eventlogtest.Open(b, eventlog.Config{MaxConsumers: c.max})
			f := eventlog.Filter{Agent: "agent0", Chunks: true}
			for b.Loop() {
				if err := lg.CheckFollow(b.Context(), f); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestFollowCancelledWhileCreatingLeavesNoConsumer: a follow whose ctx
// ends while its consumer's create is in flight leaves no consumer
// behind. The server may carry out a create the client stopped waiting
// for; that consumer lived until its inactivity threshold (5 minutes),
// holding one of the stream's consumers (TestCheckFollow failed on it
// under load, about once in 30 runs). A proxy between the Log and the
// JetStream API makes the race certain: it lets the create through,
// cancels the follow once the server has answered, and hands the answer
// to the client only after the follow has returned.
func TestFollowCancelledWhileCreatingLeavesNoConsumer(t *testing.T) {
	s := eventlogtest.RunServer(t, eventlogtest.ServerOptions{})
	fwd := eventlogtest.Connect(t, s)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan struct{})
	createPrefix := "proxy.API.CONSUMER.CREATE." + eventlog.DefaultChunksStream + "."
	var held bool
	_, err := fwd.Subscribe("proxy.API.>", func(m *nats.Msg) {
		out := &nats.Msg{Subject: "$JS.API." + strings.TrimPrefix(m.Subject, "proxy.API."), Reply: m.Reply, Data: m.Data, Header: m.Header}
		if held || !strings.HasPrefix(m.Subject, createPrefix) {
			if err := fwd.PublishMsg(out); err != nil {
				t.Errorf("forward %s: %v", m.Subject, err)
			}
			return
		}
		held = true // the one create of the follow's consumer
		out.Reply = ""
		answer, err := fwd.RequestMsg(out, 10*time.Second)
		if err != nil {
			t.Errorf("create the follow's consumer: %v", err)
			return
		}
		cancel()
		<-done
		if err := fwd.Publish(m.Reply, answer.Data); err != nil {
			t.Errorf("answer the create late: %v", err)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := fwd.Flush(); err != nil { // the server has the proxy's subscription
		t.Fatal(err)
	}
	lg := eventlogtest.OpenOn(t, s, eventlog.Config{APIPrefix: "proxy.API"})
	f := eventlog.Filter{Agent: "agent0", Stream: "s1", Chunks: true}
	go func() {
		defer close(done)
		for _, err := range lg.Follow(ctx, f, 0) {
			if !errors.Is(err, context.Canceled) {
				t.Errorf("follow cancelled while creating its consumer: %v, want context.Canceled", err)
			}
			return
		}
	}()
	<-done
	if !held {
		t.Fatal("the follow's create never reached the proxy")
	}
	js, err := jetstream.New(fwd)
	if err != nil {
		t.Fatal(err)
	}
	waitfor.NoError(t, func() error {
		info, err := js.Stream(t.Context(), eventlog.DefaultChunksStream)
		if err != nil {
			return err
		}
		if n := info.CachedInfo().State.Consumers; n != 0 {
			return fmt.Errorf("%d consumers on the chunks stream after the follow ended, want 0", n)
		}
		return nil
	})
}

// TestFollowCancelledWhileItsConsumerIsRecreated: a follow returns at its
// context's end even while its ordered consumer recreates itself, which
// nats.go does holding the consumer's lock for each create request (up to
// 10 s an attempt), where Stop waits for that lock. A view's shard
// follower restarted then (a new owner taking a killed node's
// partitions, while the consumer's server was the one killed) held the
// new owner's recovery 10-12 s in the failover bench. A proxy before the
// JetStream API lets the first create through and never answers the
// second, the re-create after the consumer was deleted.
func TestFollowCancelledWhileItsConsumerIsRecreated(t *testing.T) {
	s := eventlogtest.RunServer(t, eventlogtest.ServerOptions{})
	fwd := eventlogtest.Connect(t, s)
	createPrefix := "proxy.API.CONSUMER.CREATE." + eventlog.DefaultEventsStream + "."
	held, done := make(chan struct{}), make(chan struct{})
	creates := 0
	_, err := fwd.Subscribe("proxy.API.>", func(m *nats.Msg) {
		if strings.HasPrefix(m.Subject, createPrefix) {
			if creates++; creates == 2 {
				close(held) // the re-create: never answered
				select {
				case <-done:
				case <-time.After(time.Minute):
				}
				return
			}
		}
		forwardToJS(t, fwd, m)
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := fwd.Flush(); err != nil {
		t.Fatal(err)
	}
	lg := eventlogtest.OpenOn(t, s, eventlog.Config{APIPrefix: "proxy.API"})
	appendN(t, lg, 3, 1)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	first := make(chan struct{})
	var ended error
	go func() {
		defer close(done)
		n := 0
		for _, err := range lg.Follow(ctx, eventlog.Filter{Agent: "agent0"}, 0) {
			if err != nil {
				ended = err
				return
			}
			if n++; n == 1 {
				close(first)
			}
		}
	}()
	select {
	case <-first:
	case <-done:
		t.Fatalf("follow ended before its first event: %v", ended)
	}
	// Delete the follow's consumer: the library recreates it.
	js, err := jetstream.New(fwd)
	if err != nil {
		t.Fatal(err)
	}
	stream, err := js.Stream(t.Context(), eventlog.DefaultEventsStream)
	if err != nil {
		t.Fatal(err)
	}
	names := stream.ConsumerNames(t.Context())
	for name := range names.Name() {
		if err := stream.DeleteConsumer(t.Context(), name); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-held:
	case <-time.After(30 * time.Second):
		t.Fatal("the deleted consumer was not recreated")
	}
	cancel()
	// Not a timing: the library gives up the unanswered create only after
	// 10 s, and the old follow returned only then.
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the follow did not return at its context's end while its consumer was being recreated")
	}
	if !errors.Is(ended, context.Canceled) {
		t.Errorf("follow ended with %v, want context.Canceled", ended)
	}
}
