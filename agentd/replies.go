package agentd

import (
	"errors"
	"fmt"
	"log/slog"

	"github.com/forever-agents/forever/internal/inproc"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"
)

// Answers to clients: a tenant's client sets the reply subject of its
// requests, and NATS checks it against nobody's permissions; it checks
// what the answering user may publish. agentd's own user in the tenant's
// account may publish anywhere there (it writes the streams and KV
// buckets), so a tenant's daemon sends its answers through a second
// connection, of agentd's replier (TenantLink.Replier,
// auth.ReplierPermissions), which may publish only under _INBOX. and
// subscribes to nothing. The endpoints check the reply subject first
// (auth.CheckReply: refused, counted against the tenant's rate, audited);
// should that check ever miss one, the server refuses the publish, the
// answer is dropped and forever_agentd_replies_refused_total counts it.
//
// The replier is one more connection of the tenant's account a node (its
// quota's connections count it), opened after the daemon's own and closed
// after it drained, so commands in flight at shutdown still answer.

// Reply publishes m, an answer to a client's request: m.Subject is the
// request's reply subject, checked by the caller (auth.CheckReply). It
// goes out on Replies, so on a tenant's daemon the server refuses it
// unless m.Subject is under _INBOX.; the refusal is asynchronous (the
// connection's error handler counts and logs it), and Reply returns only
// the errors of the publish itself.
func (deps *Deps) Reply(m *nats.Msg) error {
	nc := deps.Replies
	if nc == nil {
		nc = deps.Conn
	}
	return nc.PublishMsg(m)
}

// logReplyRefusals bounds the log lines of answers the server refused.
const logReplyRefusals = 1

// registerReplyMetrics registers forever_agentd_replies_refused_total.
func (d *Daemon) registerReplyMetrics(reg prometheus.Registerer) error {
	d.repliesRefused = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "forever_agentd_replies_refused_total",
		Help: "Answers to clients the NATS server refused because their reply subject was not under _INBOX. " +
			"(a tenant's daemon answers as a user that may publish only there); nonzero means a reply subject passed agentd's own check that should not have.",
	})
	if err := reg.Register(d.repliesRefused); err != nil {
		return fmt.Errorf("%w: register metrics: %w", ErrConfig, err)
	}
	return nil
}

// connectReplier opens the replier's connection of a tenant's daemon
// (TenantLink.Replier) to the same server as the daemon's own, or returns
// nil without a replier. The caller closes it.
func (d *Daemon) connectReplier(cfg *Config) (*nats.Conn, error) {
	t := cfg.Tenant
	if t == nil || t.Replier == nil {
		return nil, nil
	}
	logger := d.cfg.Logger.With("subsystem", "nats", "connection", "replier")
	logLimit := rate.NewLimiter(logReplyRefusals, 5)
	opts := []nats.Option{
		nats.Name("agentd tenant " + t.Name + " replies"),
		nats.UserJWTAndSeed(t.Replier.JWT, string(t.Replier.Seed)),
		nats.MaxReconnects(-1),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			if errors.Is(err, nats.ErrPermissionViolation) {
				d.repliesRefused.Inc()
			}
			if logLimit.Allow() {
				logger.Warn("an answer to a client was refused by the NATS server", slog.Any("err", err))
			}
		}),
	}
	u := cfg.NATSURL
	if s := t.Server; s != nil {
		u = InProcessURL(s)
		opts = append(opts, inproc.Server(s))
	} else {
		opts = append(opts, cfg.ClientTLS()...)
	}
	nc, err := nats.Connect(u, opts...)
	if err != nil {
		return nil, fmt.Errorf("%w: tenant %s: connect agentd's replier: %w", ErrNATS, t.Name, err)
	}
	return nc, nil
}
