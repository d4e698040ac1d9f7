package tenancy_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/forever-agents/forever/agentd"
	"github.com/forever-agents/forever/agentd/agentdtest"
	"github.com/forever-agents/forever/agentd/host"
	"github.com/forever-agents/forever/agentd/tenancy"
	"github.com/forever-agents/forever/auth"
	"github.com/forever-agents/forever/internal/waitfor"
)

// TestRepliesOnlyToInboxes (issue 32): a tenant's daemon answers its
// clients through agentd's replier, a user that may publish only under
// _INBOX.: the answers of the command service and of the JetStream API
// forwarder are that connection's publishes, and an answer sent on a
// stream's or a KV bucket's subject, as if the reply-subject check had
// let it through, is refused by the server (counted in
// forever_agentd_replies_refused_total) and lands nowhere.
func TestRepliesOnlyToInboxes(t *testing.T) {
	e := startTenant(t)
	d, node, created, client, deps := e.d, e.node, e.created, e.client, e.deps
	if deps.Replies == nil || deps.Replies == deps.Conn {
		t.Fatal("the tenant's daemon has no replier connection of its own")
	}

	// The answers are the replier's publishes.
	replierIn := func() int64 {
		t.Helper()
		cz, err := node.Connz(&server.ConnzOptions{Account: created.Account})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cz.Conns {
			if c.Name == "agentd tenant acme replies" {
				return c.InMsgs
			}
		}
		t.Fatalf("no replier connection in the tenant's account among %d", len(cz.Conns))
		return 0
	}
	before := replierIn()
	for _, subject := range []string{host.ListSubject("forever"), "forever.cmd.zz.status", auth.ClientAPIPrefix + ".INFO"} {
		m, err := client.Request(subject, []byte(`{}`), 10*time.Second)
		if err != nil {
			t.Fatalf("%s: %v", subject, err)
		}
		if strings.Contains(string(m.Data), `"error"`) && subject != "forever.cmd.zz.status" {
			t.Fatalf("%s: %.300s", subject, m.Data)
		}
	}
	if after := replierIn(); after < before+3 {
		t.Errorf("3 requests answered, the replier published %d answers", after-before)
	}

	// The reply path, called as if the check had let these subjects
	// through: the server refuses each publish.
	bogus := []string{"forever.evt.zz", "forever.chunk.zz.s1", "$KV.FOREVER_PARTITIONS.epoch.0", "$KV.FOREVER_LEASES.lease.0"}
	for _, subject := range bogus {
		if err := deps.Reply(&nats.Msg{Subject: subject, Data: []byte(`{"bogus":true}`)}); err != nil {
			t.Fatalf("reply on %s: %v", subject, err)
		}
	}
	// The replier's publishes are processed in order: once an answer on
	// an inbox arrived, the ones before it were refused or stored.
	probe, err := client.SubscribeSync(auth.InboxPrefix + "probe")
	if err != nil {
		t.Fatal(err)
	}
	if err := client.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := deps.Reply(&nats.Msg{Subject: auth.InboxPrefix + "probe", Data: []byte("ok")}); err != nil {
		t.Fatal(err)
	}
	if _, err := probe.NextMsg(10 * time.Second); err != nil {
		t.Fatalf("an answer on an inbox: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	js, err := jetstream.New(deps.Conn)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ stream, subject string }{
		{"FOREVER_EVENTS", "forever.evt.zz"},
		{"KV_FOREVER_PARTITIONS", "$KV.FOREVER_PARTITIONS.epoch.0"},
		{"KV_FOREVER_LEASES", "$KV.FOREVER_LEASES.lease.0"},
	} {
		s, err := js.Stream(ctx, c.stream)
		if err != nil {
			t.Fatalf("stream %s: %v", c.stream, err)
		}
		msg, err := s.GetLastMsgForSubject(ctx, c.subject)
		if err == nil && strings.Contains(string(msg.Data), "bogus") {
			t.Errorf("an answer on %s was stored in %s", c.subject, c.stream)
		}
	}
	// Each refusal is counted (the server's -ERR arrives asynchronously).
	want := `forever_agentd_replies_refused_total{tenant="acme"} 4`
	waitfor.NoError(t, func() error {
		_, body := agentdtest.Get(t, "http://"+d.MetricsAddr()+"/metrics")
		if !strings.Contains(body, want) {
			i := strings.Index(body, "forever_agentd_replies_refused_total{")
			return fmt.Errorf("metrics with %q; have %.200s", want, body[max(i, 0):])
		}
		return nil
	})
}

// TestClientConsumersAreNotAcked (issue 32): the server answers an ack's
// reply subject itself, from inside the account, so an acked consumer
// would let a client store a message on any subject of its account (an
// empty one on forever.evt.<agent>, tried: it landed in FOREVER_EVENTS).
// Through the forwarder a client creates ordered consumers (ack none)
// only: one with explicit acks is refused with a 403 saying why, and its
// credential may not publish an ack; an ordered consumer still reads its
// chunks.
func TestClientConsumersAreNotAcked(t *testing.T) {
	e := startTenant(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	own, err := jetstream.New(e.deps.Conn)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := own.Publish(ctx, "forever.chunk.zz.s1", []byte(`{"type":"text-delta","delta":"hi"}`)); err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.NewWithAPIPrefix(e.client, auth.ClientAPIPrefix)
	if err != nil {
		t.Fatal(err)
	}
	_, err = js.CreateConsumer(ctx, "FOREVER_CHUNKS", jetstream.ConsumerConfig{Name: "acked", AckPolicy: jetstream.AckExplicitPolicy, InactiveThreshold: time.Minute})
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) || apiErr.Code != 403 || !strings.Contains(apiErr.Description, "ack_policy") {
		t.Fatalf("an explicitly acked consumer: %v, want 403 naming ack_policy", err)
	}
	// An ack published anyway, with an event subject as its reply, is
	// refused by the server (the client's credential may not ack).
	denied := make(chan error, 1)
	e.client.SetErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		select {
		case denied <- err:
		default:
		}
	})
	if err := e.client.PublishMsg(&nats.Msg{Subject: "$JS.ACK.FOREVER_CHUNKS.acked.1.1.1.1.0", Reply: "forever.evt.yy"}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-denied:
		if !errors.Is(err, nats.ErrPermissionViolation) {
			t.Fatalf("an ack: %v, want a permissions violation", err)
		}
	case <-ctx.Done():
		t.Fatal("an ack by the client was not refused")
	}
	s, err := own.Stream(ctx, "FOREVER_EVENTS")
	if err != nil {
		t.Fatal(err)
	}
	if m, err := s.GetLastMsgForSubject(ctx, "forever.evt.yy"); err == nil {
		t.Errorf("stored on forever.evt.yy: %q %v", m.Data, m.Header)
	}
	// What clients use still works: an ordered consumer reads the chunk.
	oc, err := js.OrderedConsumer(ctx, "FOREVER_CHUNKS", jetstream.OrderedConsumerConfig{FilterSubjects: []string{"forever.chunk.zz.>"}})
	if err != nil {
		t.Fatal(err)
	}
	m, err := oc.Next(jetstream.FetchMaxWait(10 * time.Second))
	if err != nil || !strings.Contains(string(m.Data()), "hi") {
		t.Fatalf("an ordered consumer's first chunk: %v", err)
	}
}

// tenantEnv is a node with --auth serving one tenant, acme, whose
// daemon hosts the steps agent type, and a client of acme with a
// reader's credential.
type tenantEnv struct {
	d       *agentd.Daemon
	node    *server.Server      // the node's embedded server
	created tenancy.CreateReply // acme's creation: its account and creds
	client  *nats.Conn          // acme's reader
	deps    *agentd.Deps        // of acme's daemon
}

// startTenant starts a tenantEnv that lasts until the test ends.
func startTenant(t *testing.T) *tenantEnv {
	t.Helper()
	n := startNode(t)
	created := n.create(t, tenancy.CreateRequest{Name: "acme", Role: "reader"})
	return &tenantEnv{d: n.d, node: n.server, created: created, client: n.connect(t, created.Creds), deps: <-n.deps}
}
