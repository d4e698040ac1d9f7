package agentd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"syscall"
	"time"

	"github.com/forever-agents/forever/internal/inproc"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// serverStartTimeout bounds how long the embedded server may take to accept
// connections (JetStream recovers its streams before that).
const serverStartTimeout = 2 * time.Minute

// tlsTimeout is the embedded server's TLS handshake timeout, in seconds.
const tlsTimeout = 2.0

// checkListen fails with ErrAddrInUse when addr cannot be listened on because
// it is taken, naming flag. Port 0 is always free.
func checkListen(what, flag, addr string) error {
	ln, err := listen(what, flag, addr)
	if err != nil {
		return err
	}
	return ln.Close()
}

// listen listens on addr and translates failures into errors that name flag.
func listen(what, flag, addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	switch {
	case errors.Is(err, syscall.EADDRINUSE):
		return nil, newFlagError(ErrAddrInUse, err, flag, fmt.Sprintf("%s %s is in use", what, addr))
	case err != nil:
		return nil, newFlagError(ErrConfig, err, flag, fmt.Sprintf("%s %s: %v", what, addr, err))
	}
	return ln, nil
}

// startServer starts the embedded nats-server with JetStream storing under
// <DataDir>/jetstream and waits until it accepts connections. The caller
// shuts it down.
func startServer(ctx context.Context, cfg *Config, logger *slog.Logger, op *Operator, tc *certs, denials *denialLog) (*server.Server, error) {
	host, port, err := splitAddr(cfg.NATSListen)
	if err != nil {
		return nil, configErrorf("nats-listen", "nats listen address %q: %v", cfg.NATSListen, err)
	}
	if port == 0 {
		port = server.RANDOM_PORT
	} else if err := checkListen("nats listen address", "nats-listen", cfg.NATSListen); err != nil {
		return nil, err
	}
	opts := &server.Options{
		Host:      host,
		Port:      port,
		JetStream: true,
		// nats-server stores JetStream data in <StoreDir>/jetstream.
		StoreDir:               cfg.DataDir,
		JetStreamMaxMemory:     cfg.JetStreamMaxMemory,
		JetStreamMaxStore:      cfg.JetStreamMaxStore,
		SyncAlways:             cfg.Sync == SyncAlways,
		NoSigs:                 true,
		DisableJetStreamBanner: true,
	}
	if err := clusterOptions(cfg, opts); err != nil {
		return nil, err
	}
	if err := cfg.encryptionOptions(opts); err != nil {
		return nil, err
	}
	if op != nil {
		if err := op.serverOptions(cfg.DataDir, opts); err != nil {
			return nil, err
		}
	}
	if tc != nil {
		// Clients must use TLS (agentd's own in-process connection need
		// not); routes use mutual TLS.
		opts.TLS, opts.TLSConfig, opts.TLSTimeout = true, tc.serverConfig(), tlsTimeout
		if cfg.clustered() {
			opts.Cluster.TLSConfig, opts.Cluster.TLSTimeout = tc.routeConfig(), tlsTimeout
		}
	}
	s, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("%w: embedded server: %w", ErrNATS, err)
	}
	nl := &serverLogger{l: logger.With("subsystem", "nats-server"), fatal: make(chan string, 1), denials: denials}
	s.SetLoggerV2(nl, logger.Enabled(ctx, slog.LevelDebug), false, false)
	s.Start()
	deadline := time.Now().Add(serverStartTimeout)
	for !s.ReadyForConnections(100 * time.Millisecond) {
		var cause error
		select {
		case msg := <-nl.fatal:
			cause = errors.New(msg)
		default:
			switch {
			case ctx.Err() != nil:
				cause = ctx.Err()
			case time.Now().After(deadline):
				cause = fmt.Errorf("not ready after %s", serverStartTimeout)
			}
		}
		if cause == nil {
			continue
		}
		s.Shutdown()
		s.WaitForShutdown()
		if strings.Contains(cause.Error(), "address already in use") {
			return nil, newFlagError(ErrAddrInUse, cause, "nats-listen",
				fmt.Sprintf("nats listen address %s is in use", cfg.NATSListen))
		}
		return nil, fmt.Errorf("%w: embedded server: %w", ErrNATS, cause)
	}
	select {
	case msg := <-nl.fatal: // e.g. JetStream failed to start but clients are accepted
		s.Shutdown()
		s.WaitForShutdown()
		if strings.Contains(msg, undecryptable) {
			return nil, configErrorf("encryption-key-file", "the JetStream store under %s cannot be decrypted: it was written with "+
				"another --encryption-key-file, or with one and this start has none (%s)", cfg.JetStreamDir(), strings.TrimSpace(msg))
		}
		return nil, fmt.Errorf("%w: embedded server: %s", ErrNATS, msg)
	default:
	}
	if !s.JetStreamEnabled() {
		s.Shutdown()
		s.WaitForShutdown()
		return nil, fmt.Errorf("%w: embedded server started without JetStream", ErrNATS)
	}
	jc := s.JetStreamConfig()
	nl.l.Info("nats server started", "version", server.VERSION, "name", s.Name(), "url", s.ClientURL(),
		"cluster", cfg.ClusterName, "store", jc.StoreDir, "max_store", jc.MaxStore, "max_memory", jc.MaxMemory, "sync_always", jc.SyncAlways)
	return s, nil
}

// syncQueueLen is the buffer of each synchronous subscription on the
// daemon's connection (nats.SyncQueueLen). nats.go's default is 65,536
// messages: a channel of 512 KiB, allocated zeroed and scanned by the
// collector while it lives, for each live follow of a chat stream
// (chunk.Live.Subscribe, held for the turn) and each batched direct get
// (eventlog's NextBatch and Read, through jetstreamext.GetBatch). At
// saturation that was 6-8% of a node's CPU in the allocation alone, and
// most of its collector's work (docs/benchmarks.md, "A follow's 512 KiB
// channel"). 1,024 holds what any of them is sent before it reads: a
// batched get asks for 256 events at most (and its end marker), a live
// follow is bounded at 1,024 (chunk.Live), a stream snapshot's window
// is 64 chunks of 128 KiB (backup.Snapshot). A subscription that falls
// behind further is a slow consumer, which each of them reports.
const syncQueueLen = 1024

// connect opens the daemon's NATS connection: in-process to the embedded
// server s, or to cfg.NATSURL when s is nil. closed is closed once the
// connection is closed (after Drain).
func connect(cfg *Config, s *server.Server, logger *slog.Logger, closed chan<- struct{}, op *Operator) (*nats.Conn, error) {
	logger = logger.With("subsystem", "nats")
	opts := []nats.Option{
		nats.Name("agentd"),
		nats.SyncQueueLen(syncQueueLen),
		nats.MaxReconnects(-1),
		nats.DrainTimeout(cfg.ShutdownTimeout),
		nats.ClosedHandler(func(*nats.Conn) { close(closed) }),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				logger.Warn("nats disconnected", "err", err)
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			logger.Info("nats reconnected", "url", redactURL(nc.ConnectedUrl()))
		}),
	}
	u := cfg.NATSURL
	if t := cfg.Tenant; t != nil {
		s = t.Server
		opts = append(opts, nats.Name("agentd tenant "+t.Name),
			nats.UserJWTAndSeed(t.User.JWT, string(t.User.Seed)))
	}
	if op != nil {
		opts = append(opts, op.connOption())
	}
	if cfg.NATSCreds != "" && cfg.Tenant == nil {
		opts = append(opts, nats.UserCredentials(cfg.NATSCreds))
	}
	if s == nil {
		opts = append(opts, cfg.ClientTLS()...)
	}
	if s != nil {
		u = InProcessURL(s)
		opts = append(opts, inproc.Server(s))
	}
	nc, err := nats.Connect(u, opts...)
	if err != nil {
		if s != nil {
			return nil, fmt.Errorf("%w: connect to embedded server: %w", ErrNATS, err)
		}
		return nil, newFlagError(ErrNATS, err, "nats-url",
			fmt.Sprintf("connect to NATS at %s: %v", redactURL(u), err))
	}
	return nc, nil
}

// ClientTLS are the TLS options of a connection to --nats-url: its CA
// and a client certificate, each when given.
func (cfg *Config) ClientTLS() []nats.Option {
	var opts []nats.Option
	if cfg.TLSCA != "" {
		opts = append(opts, nats.RootCAs(cfg.TLSCA))
	}
	if cfg.TLSCert != "" {
		opts = append(opts, nats.ClientCert(cfg.TLSCert, cfg.TLSKey))
	}
	return opts
}

// InProcessURL is the URL of an in-process connection to s: nats://, also
// when s requires TLS of its network clients (in-process ones need none,
// and a tls:// URL would make the client verify the certificate).
func InProcessURL(s *server.Server) string {
	return "nats" + strings.TrimPrefix(strings.TrimPrefix(s.ClientURL(), "tls"), "nats")
}

// redactURL hides passwords and tokens in NATS URLs for logs and errors.
func redactURL(raw string) string {
	parts := strings.Split(raw, ",")
	for i, p := range parts {
		u, err := url.Parse(strings.TrimSpace(p))
		if err != nil || u.User == nil {
			continue
		}
		if _, ok := u.User.Password(); ok {
			parts[i] = u.Redacted()
		} else {
			u.User = url.User("xxxxx")
			parts[i] = u.String()
		}
	}
	return strings.Join(parts, ",")
}

// serverLogger routes the embedded server's log lines to slog. Fatal lines
// (after which the server stops starting) are logged at error level and
// reported on fatal; the process is never exited.
type serverLogger struct {
	l       *slog.Logger
	fatal   chan string
	denials *denialLog // counts and rate-limits the clients refused
}

// Noticef logs at DEBUG: the server's notices (its start-up banner, route
// and leader changes) are many lines per phase; agentd logs one summary
// line for the server it started, and warnings and errors keep their
// levels.
func (s *serverLogger) Noticef(format string, v ...any) { s.l.Debug(fmt.Sprintf(format, v...)) }
func (s *serverLogger) Warnf(format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	if s.denials.take(s.l, msg) {
		return
	}
	s.l.Warn(msg)
	if strings.Contains(msg, undecryptable) {
		// The server skips a stream it cannot decrypt; agentd would then
		// create it anew over the data it holds.
		s.report(msg)
	}
}

// undecryptable starts the server's warning about a stream or consumer
// whose store it cannot decrypt (another key, or none).
const undecryptable = "Error decrypting our"

func (s *serverLogger) report(msg string) {
	select {
	case s.fatal <- msg:
	default:
	}
}
func (s *serverLogger) Errorf(format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	if s.denials.take(s.l, msg) {
		return
	}
	if peerGone(msg) {
		// A peer that is down, not up yet, or went away mid-write (it
		// stopped or was killed): the cluster goes on without it (its
		// partitions move), so this is a warning, not an error of this
		// node; ReconnectErrorReports spaces the connect lines out.
		s.l.Warn(msg)
		return
	}
	s.l.Error(msg)
}

// routeConnectError starts the server's line about a route peer it cannot
// reach.
const routeConnectError = "Error trying to connect to route"

// peerGone reports whether an error line of the server is about a route
// peer that cannot be reached or whose connection dropped under a write:
// "<addr> - rid:<n> - Error flushing: ... connection reset by peer" (or a
// broken pipe) when the peer's process ended. Client connections ("cid")
// keep their error level.
func peerGone(msg string) bool {
	if strings.HasPrefix(msg, routeConnectError) {
		return true
	}
	if !strings.Contains(msg, " - rid:") {
		return false
	}
	return strings.Contains(msg, "connection reset by peer") || strings.Contains(msg, "broken pipe")
}

func (s *serverLogger) Debugf(format string, v ...any) { s.l.Debug(fmt.Sprintf(format, v...)) }
func (s *serverLogger) Tracef(format string, v ...any) { s.l.Debug(fmt.Sprintf(format, v...)) }
func (s *serverLogger) Fatalf(format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	s.l.Error(msg, "fatal", true)
	s.report(msg)
}
