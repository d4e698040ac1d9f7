package tenancy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"
	"golang.org/x/time/rate"

	"github.com/forever-agents/forever/agentd"
	"github.com/forever-agents/forever/agentd/quota"
	"github.com/forever-agents/forever/auth"
	"github.com/forever-agents/forever/eventlog"
)

// jsAPIQueue is the queue group of the tenant's daemons (one a node) that
// forward its clients' JetStream API requests.
const jsAPIQueue = "forever-jsapi"

// uncounted are the API calls a stream or a consumer answers itself, not
// the server's shared API queue: a direct get, and a pull consumer's next
// batch (an ordered consumer pulls as it goes). They are forwarded without
// taking from the tenant's rate.
var uncounted = []string{"DIRECT.GET.", pullPrefix}

// pullPrefix starts a pull consumer's next-batch request.
const pullPrefix = "CONSUMER.MSG.NEXT."

// Bounds of the relay of API answers (jsRelay).
const (
	// relayTTL is how long an API call's answer is waited for; a batched
	// direct get's answers are relayed for relayTTL and relaySlack.
	relayTTL   = 10 * time.Second
	relaySlack = 5 * time.Second
	// relayPending bounds the calls waiting for answers; past it a call
	// is answered 503.
	relayPending = 4096
)

// startJSAPI forwards the tenant's clients' JetStream API requests, sent
// to auth.ClientAPIPrefix, to $JS.API in the tenant's account, each
// through the tenant's rate quota (Allow): past it the client gets a
// JetStream API error 429. The client's permissions already limited the
// subjects to the calls an ordered consumer makes, on any stream; the
// forwarder refuses those on a stream but the log's chunks streams
// (checkStream). A request is forwarded only when
// its reply subject is an inbox (auth.CheckReply), and the API answers
// agentd's own inbox, from which the answers are relayed to the client's
// (jsRelay) through the replier (agentd.Deps.Reply, a user that may
// publish only under _INBOX.): the server never publishes on a subject
// the client chose, and agentd never does but as the replier.
// A pull (CONSUMER.MSG.NEXT) is the exception: the consumer delivers each
// message with the subject it was stored on, which a relay cannot keep,
// so it delivers to the client's inbox itself.
// A request refused for its reply subject is not answered, takes one
// request from the tenant's rate, and is logged and audited
// (Config.AuditCommand). Call it from a StartFunc of the tenant's daemon.
func startJSAPI(d *agentd.Daemon, deps *agentd.Deps) error {
	nc := deps.Conn
	prefix := auth.ClientAPIPrefix + "."
	r := &jsRelay{nc: nc, reply: deps.Reply, inbox: nc.NewInbox() + ".", pending: map[string]relayTo{}}
	rsub, err := nc.Subscribe(r.inbox+"*", r.answer)
	if err != nil {
		return fmt.Errorf("tenant jetstream api: %w", err)
	}
	logLimit := rate.NewLimiter(1, 10)
	sub, err := nc.QueueSubscribe(prefix+">", jsAPIQueue, func(m *nats.Msg) {
		if err := auth.CheckReply(m.Reply); err != nil {
			_ = deps.Quotas.Allow() // counted; nothing is answered either way
			refuseJSAPI(deps, logLimit, m, err)
			return
		}
		rest := strings.TrimPrefix(m.Subject, prefix)
		counted := true
		for _, u := range uncounted {
			counted = counted && !strings.HasPrefix(rest, u)
		}
		if counted {
			if err := deps.Quotas.Allow(); err != nil {
				respondAPIError(deps, m, err)
				return
			}
		}
		if err := checkStream(deps.Log.ChunksStream(), rest); err != nil {
			respondAPIError(deps, m, err)
			return
		}
		if err := checkConsumer(rest, m.Data); err != nil {
			respondAPIError(deps, m, err)
			return
		}
		if strings.HasPrefix(rest, pullPrefix) {
			// A pull's messages are delivered with their own subjects,
			// which a relay's publish cannot keep: the consumer
			// delivers them to the client's inbox, checked above.
			out := &nats.Msg{Subject: "$JS.API." + rest, Reply: m.Reply, Data: m.Data, Header: m.Header}
			if out.Header != nil {
				out.Header.Del("Nats-Request-Info")
			}
			_ = nc.PublishMsg(out)
			return
		}
		if err := r.forward("$JS.API."+rest, m); err != nil {
			respondAPIError(deps, m, err)
		}
	})
	if err != nil {
		_ = rsub.Unsubscribe()
		return fmt.Errorf("tenant jetstream api: %w", err)
	}
	return d.Add("jetstream api", agentd.ComponentFunc(func(ctx context.Context) error {
		tick := time.NewTicker(relaySlack)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return errors.Join(sub.Unsubscribe(), rsub.Unsubscribe())
			case now := <-tick.C:
				r.sweep(now)
			}
		}
	}))
}

// refuseJSAPI logs (at most as often as limit allows) and audits an API
// request refused for its reply subject.
func refuseJSAPI(deps *agentd.Deps, limit *rate.Limiter, m *nats.Msg, err error) {
	err = fmt.Errorf("%w (request on %s)", err, m.Subject)
	if limit.Allow() {
		deps.Logger.Warn("jetstream api request refused: its reply subject is not an inbox",
			slog.String("subject", m.Subject), slog.String("reply", m.Reply))
	}
	if deps.Config.AuditCommand != nil {
		deps.Config.AuditCommand(context.Background(), "", m.Subject, err)
	}
}

// jsRelay relays the JetStream API's answers from agentd's own inbox to
// the clients' inboxes: each forwarded call gets a token under inbox, and
// the answers to it go to the client's reply subject (checked) until the
// call is done (its first answer; a batched get's last) or its time is
// up. Answers are published on the token's subject (a pull's deliveries
// are not: they keep their stored subjects, and go to the client itself).
type jsRelay struct {
	nc    *nats.Conn            // agentd's own: calls and their answers
	reply func(*nats.Msg) error // to a client: agentd.Deps.Reply
	inbox string                // agentd's own, ending in '.'

	mu      sync.Mutex
	pending map[string]relayTo
}

// relayTo is where a forwarded call's answers go.
type relayTo struct {
	reply    string
	deadline time.Time
	stream   bool // several answers: a batched direct get
}

// errRelayFull refuses a call while relayPending calls wait.
var errRelayFull = errors.New("agentd: too many JetStream API calls waiting for answers, retry later")

// forward sends m (reply checked) to subject, answering agentd's inbox.
func (r *jsRelay) forward(subject string, m *nats.Msg) error {
	to := relayTo{reply: m.Reply, deadline: time.Now().Add(relayTTL)}
	if ttl, stream := answers(subject, m.Data); stream {
		to.stream, to.deadline = true, time.Now().Add(ttl)
	}
	token := nuid.Next()
	r.mu.Lock()
	if len(r.pending) >= relayPending {
		r.mu.Unlock()
		return errRelayFull
	}
	r.pending[token] = to
	r.mu.Unlock()
	out := &nats.Msg{Subject: subject, Reply: r.inbox + token, Data: m.Data, Header: m.Header}
	if out.Header != nil {
		out.Header.Del("Nats-Request-Info") // the server says who asks, not the client
	}
	if err := r.nc.PublishMsg(out); err != nil {
		r.mu.Lock()
		delete(r.pending, token)
		r.mu.Unlock()
		return fmt.Errorf("agentd: forward the JetStream API call: %w", err)
	}
	return nil
}

// answers says whether a call to subject with payload data is answered
// by several messages, and then for how long: a direct get of a batch or
// of several subjects' last messages.
func answers(subject string, data []byte) (time.Duration, bool) {
	var req struct {
		Batch     int      `json:"batch"`
		MultiLast []string `json:"multi_last"`
	}
	if strings.HasPrefix(subject, "$JS.API.DIRECT.GET.") && json.Unmarshal(data, &req) == nil && (req.Batch > 1 || len(req.MultiLast) > 0) {
		return relayTTL + relaySlack, true
	}
	return 0, false
}

// answer relays one answer from agentd's inbox to its call's client.
func (r *jsRelay) answer(m *nats.Msg) {
	token := m.Subject[strings.LastIndexByte(m.Subject, '.')+1:]
	r.mu.Lock()
	to, ok := r.pending[token]
	// A call is done at its first answer, a batch at a status: the end of
	// the batch (204), no messages (404).
	if ok && (!to.stream || done(m)) {
		delete(r.pending, token)
	}
	r.mu.Unlock()
	if !ok {
		return
	}
	_ = r.reply(&nats.Msg{Subject: to.reply, Reply: m.Reply, Header: m.Header, Data: m.Data})
}

// done reports whether m ends a batch: a status other than 100.
func done(m *nats.Msg) bool {
	s := m.Header.Get("Status")
	return s != "" && s != "100"
}

// sweep drops the calls whose time is up.
func (r *jsRelay) sweep(now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for token, to := range r.pending {
		if now.After(to.deadline) {
			delete(r.pending, token)
		}
	}
}

// MaxClientInactive bounds the inactivity threshold of a client's
// consumer: the client library's default for an ordered consumer.
const MaxClientInactive = 5 * time.Minute

// errConsumerRefused refuses a consumer a tenant's client may not
// create through the forwarder (checkConsumer).
type errConsumerRefused struct{ why string }

func (e *errConsumerRefused) Error() string {
	return "a client may create only ephemeral pull consumers of the chunk stream, which end when unused: " + e.why
}

// checkConsumer refuses the consumers a tenant's client asks for that
// would outlive it or publish where it chose: a durable one (a durable
// name, or the durable create call) or one kept past MaxClientInactive
// unused, which would hold the tenant's consumer quota and leave its own
// chats unable to follow their streams, a push one (a deliver subject), on whose subject
// the server would publish in the tenant's account, and one that is
// acked (ack_policy other than none), whose acks' reply subjects the
// server would publish on. rest is the API
// call's subject after $JS.API.; a payload that does not parse is left
// to the server, which refuses it.
func checkConsumer(rest string, data []byte) error {
	if strings.HasPrefix(rest, "CONSUMER.DURABLE.CREATE.") {
		return &errConsumerRefused{"this one is durable (CONSUMER.DURABLE.CREATE)"}
	}
	if !strings.HasPrefix(rest, "CONSUMER.CREATE.") {
		return nil
	}
	var req struct {
		Config struct {
			Durable        string        `json:"durable_name"`
			DeliverSubject string        `json:"deliver_subject"`
			Inactive       time.Duration `json:"inactive_threshold"`
			AckPolicy      string        `json:"ack_policy"`
		} `json:"config"`
	}
	if json.Unmarshal(data, &req) != nil {
		return nil
	}
	switch {
	case req.Config.Durable != "":
		return &errConsumerRefused{"durable_name is set"}
	case req.Config.DeliverSubject != "":
		return &errConsumerRefused{"deliver_subject is set (a push consumer)"}
	case req.Config.Inactive > MaxClientInactive:
		return &errConsumerRefused{fmt.Sprintf("inactive_threshold is %s, more than %s", req.Config.Inactive, MaxClientInactive)}
	case req.Config.AckPolicy != "none":
		// The server answers an ack's reply subject itself, from inside
		// the account: an acked consumer would let the client choose
		// where the server publishes (an event subject, a KV key).
		return &errConsumerRefused{fmt.Sprintf("ack_policy is %q, not \"none\" (an ordered consumer's)", req.Config.AckPolicy)}
	}
	return nil
}

// streamCalls are the API calls (after $JS.API.) a client may make that
// name a stream, its name the token after the prefix
// (auth.ClientPermissions); INFO (the account's) names none.
var streamCalls = []string{"STREAM.INFO.", "STREAM.MSG.GET.", "DIRECT.GET.", "CONSUMER.CREATE.",
	"CONSUMER.DURABLE.CREATE.", "CONSUMER.INFO.", "CONSUMER.DELETE.", pullPrefix}

// errStreamRefused refuses an API call on a stream other than the log's
// chunks streams (checkStream).
type errStreamRefused struct{ call string }

func (e *errStreamRefused) Error() string {
	return "a client may use only the chunks streams (FOREVER_CHUNKS, or a shard's FOREVER_CHUNKS_<k>): not " + e.call
}

// checkStream refuses the API calls (rest: the subject after $JS.API.)
// a client's permissions let through on a stream that is not one of the
// log's chunks streams: base (eventlog.Log.ChunksStream, the unsharded
// name, which a client binding the log asks for first) or a shard's,
// <base>_<k> for k in [0, eventlog.MaxShards). The permissions name the
// stream with a wildcard (auth.ClientPermissions), so without this a
// client could read the events streams, or pull from agentd's own
// consumers. A call with no stream but the account's INFO is refused.
func checkStream(base, rest string) error {
	if rest == "INFO" {
		return nil
	}
	for _, c := range streamCalls {
		name, ok := strings.CutPrefix(rest, c)
		if !ok {
			continue
		}
		if i := strings.IndexByte(name, '.'); i >= 0 {
			name = name[:i]
		}
		if name == base {
			return nil
		}
		if k, ok := strings.CutPrefix(name, base+"_"); ok {
			n, err := strconv.Atoi(k)
			if err == nil && n >= 0 && n < eventlog.MaxShards && strconv.Itoa(n) == k {
				return nil
			}
		}
		break
	}
	return &errStreamRefused{call: rest}
}

// respondAPIError answers a request refused for the tenant's rate (429),
// or a consumer or a stream refused (checkConsumer, checkStream: 403), as the JetStream API
// answers an error, so clients read it as one. Its reply
// subject was checked (auth.CheckReply); the answer goes out through the
// replier (agentd.Deps.Reply).
func respondAPIError(deps *agentd.Deps, m *nats.Msg, err error) {
	code := 503
	var qe *quota.Error
	var ce *errConsumerRefused
	var se *errStreamRefused
	switch {
	case errors.As(err, &qe):
		code = qe.StatusCode()
	case errors.As(err, &ce), errors.As(err, &se):
		code = 403
	}
	b, _ := json.Marshal(map[string]any{
		"type":  "io.nats.jetstream.api.v1.error",
		"error": map[string]any{"code": code, "err_code": 0, "description": err.Error()},
	})
	_ = deps.Reply(&nats.Msg{Subject: m.Reply, Data: b})
}
