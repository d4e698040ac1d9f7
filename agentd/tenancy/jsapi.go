package tenancy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/forever-agents/forever/agentd"
	"github.com/forever-agents/forever/agentd/quota"
	"github.com/forever-agents/forever/auth"
)

// jsAPIQueue is the queue group of the tenant's daemons (one a node) that
// forward its clients' JetStream API requests.
const jsAPIQueue = "forever-jsapi"

// uncounted are the API calls a stream or a consumer answers itself, not
// the server's shared API queue: a direct get, and a pull consumer's next
// batch (an ordered consumer pulls as it goes). They are forwarded without
// taking from the tenant's rate.
var uncounted = []string{"DIRECT.GET.", "CONSUMER.MSG.NEXT."}

// startJSAPI forwards the tenant's clients' JetStream API requests, sent
// to auth.ClientAPIPrefix, to $JS.API in the tenant's account, each
// through the tenant's rate quota (Allow): past it the client gets a
// JetStream API error 429. The client's permissions already limited the
// subjects to its chunk stream's reads; the reply goes straight to the
// client's inbox. Call it from a StartFunc of the tenant's daemon.
func startJSAPI(d *agentd.Daemon, deps *agentd.Deps) error {
	nc := deps.Conn
	prefix := auth.ClientAPIPrefix + "."
	sub, err := nc.QueueSubscribe(prefix+">", jsAPIQueue, func(m *nats.Msg) {
		rest := strings.TrimPrefix(m.Subject, prefix)
		counted := true
		for _, u := range uncounted {
			counted = counted && !strings.HasPrefix(rest, u)
		}
		if counted {
			if err := deps.Quotas.Allow(); err != nil {
				respondAPIError(m, err)
				return
			}
		}
		out := &nats.Msg{Subject: "$JS.API." + rest, Reply: m.Reply, Data: m.Data, Header: m.Header}
		if out.Header != nil {
			out.Header.Del("Nats-Request-Info") // the server says who asks, not the client
		}
		_ = nc.PublishMsg(out)
	})
	if err != nil {
		return fmt.Errorf("tenant jetstream api: %w", err)
	}
	return d.Add("jetstream api", agentd.ComponentFunc(func(ctx context.Context) error {
		<-ctx.Done()
		return sub.Unsubscribe()
	}))
}

// respondAPIError answers a request refused for the tenant's rate as the
// JetStream API answers an error, so clients read it as one.
func respondAPIError(m *nats.Msg, err error) {
	if m.Reply == "" {
		return
	}
	code := 503
	var qe *quota.Error
	if errors.As(err, &qe) {
		code = qe.StatusCode()
	}
	b, _ := json.Marshal(map[string]any{
		"type":  "io.nats.jetstream.api.v1.error",
		"error": map[string]any{"code": code, "err_code": 0, "description": err.Error()},
	})
	_ = m.Respond(b)
}
