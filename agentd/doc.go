// Package agentd is Forever's daemon: it runs NATS (an embedded nats-server
// with JetStream, or an external server), the partition leases, the event
// log with its Pebble projections, an HTTP server with health and metrics,
// and the components that user programs and the packages above it add:
//
//   - agentd/host: the agent runtime (agent types, activation, partitions,
//     command routing over NATS);
//   - agentd/chathost: the chat agent type, its HTTP gateway and retention;
//   - agentd/demo: the steps agent and the demo tools;
//   - agentd/tenancy: tenants, each a daemon of its own in a NATS account,
//     their registry, admin service and HTTP routing by bearer token;
//   - agentd/quota: a tenant's quotas.
//
// The agentd binary (cmd/agentd) wires them together and holds the CLI;
// programs that host their own agents import these packages. Nothing here
// imports them: they import this package.
//
// # Model
//
// A Daemon owns every resource it opens and every goroutine it starts. Run
// starts in this order, checking the cheap things first so that a bad flag
// fails before anything starts:
//
//  1. the data dir: created when missing; an error (ErrDataDir, naming
//     --data) when it is a file, cannot be created or is not writable.
//     It (and its jetstream and pebble dirs when they exist) is made, or
//     narrowed to, 0700, DataDirPerm: they hold conversations, keys and
//     credentials (the agentd binary also sets the umask to 077, so every
//     file and directory made under it is its user's only);
//  2. the HTTP listener and the NATS listen port: ErrAddrInUse naming --http
//     or --nats-listen when taken. HTTP serves from here on: /healthz and
//     /metrics as usual, every other path 503 {"status":"starting"} with
//     Retry-After until step 7, so probes never hang on a starting node;
//  3. the embedded nats-server with JetStream storing in <data>/jetstream,
//     fsyncing every write (SyncAlways) unless Config.Sync is SyncInterval;
//     or, with Config.NATSURL, no server and a connection to that URL;
//  4. the NATS connection (in-process to the embedded server);
//  5. the event log, Pebble under <data>/pebble;
//  6. the StartFuncs added with OnStart, which wire components, projectors
//     and HTTP handlers to Deps (the connection, the log, the logger, the
//     metrics registerer);
//  7. the components and projectors, each Run under one errgroup, and the
//     full HTTP mux.
//
// It then blocks until ctx is done or a component fails, and shuts down in
// the reverse order: HTTP stops accepting requests (requests in flight get
// Config.ShutdownTimeout, then their contexts are cancelled), components and
// projectors are cancelled and waited for, the NATS connection is drained,
// the event log is closed and the embedded server shut down and waited for.
//
// # HTTP
//
//   - GET /healthz: 200 while the NATS connection is up, 503 otherwise. The
//     liveness probe: it fails only when restarting the process can help.
//   - GET /readyz: the readiness probe. 200 when the node can serve
//     commands: started, connected, every view caught up and following its
//     stream, the first round of leases taken and, a lease TTL after that,
//     at least one of the partitions the assignment gives it held, every
//     stream and bucket of Forever present (the guard heals one that was
//     lost, see Daemon.Guard), Pebble writing and, clustered, the embedded
//     server's JetStream replicas current. 503 with Retry-After otherwise,
//     and while stopping. The JSON body (Health) lists each view's
//     readiness, the partitions owned and assigned, and "reasons": one
//     sentence per condition that fails, naming the stream, bucket, view or
//     limit. A node that serves reads but refuses writes (a full JetStream
//     store) stays 200 and says why under "degraded". The same conditions
//     are the metrics forever_agentd_ready_reason{reason} (starting,
//     stopping, nats, replicas, leases, partitions, store_missing,
//     views_stalled) and forever_agentd_degraded{reason} (store_full,
//     tls_expired: a TLS certificate past its NotAfter, which SIGHUP with
//     a renewed one heals).
//   - GET /metrics: Prometheus metrics from Config.Gatherer (the registry
//     main creates, with the Go and process collectors), including
//     forever_eventlog_*, forever_agentd_ready, forever_agentd_nats_connected,
//     forever_agentd_store_faults_total{store,kind},
//     forever_agentd_tls_cert_not_after_seconds (with --tls-cert) and, with the embedded
//     server, forever_jetstream_store_bytes, forever_jetstream_store_max_bytes,
//     forever_jetstream_memory_bytes, forever_jetstream_memory_max_bytes and
//     forever_jetstream_meta_leader.
//     With Config.MetricsListen (--metrics-listen), or under Auth, where
//     the series name every tenant, it moves to a listener of its own
//     (default under Auth: DefaultAuthMetricsListen, 127.0.0.1:9464) and
//     the HTTP port answers it 404; without either it stays on the HTTP
//     port.
//   - GET /debug/quarantine: the stored events the views skipped as corrupt
//     (eventlog.Log.Quarantine), as a JSON array.
//   - GET /v1/cluster (without auth, and on each tenant's daemon): this
//     node's view of the cluster (ClusterInfo): the nodes and the
//     partitions each holds, every lease with its epoch, the last lease
//     moves it saw, the events and chunks streams and the lease bucket
//     with their leaders and replicas, and the store's use (JetStream's
//     of the account, the Pebble views, the data dir's disk). Under auth
//     the admin token reaches the node's (package tenancy).
//   - Anything added with Handle or HandleFunc.
//
// The server bounds what a client can hold: request headers (and a TLS
// handshake) must arrive within Config.HTTPReadHeaderTimeout (10s), a
// request's body within HTTPBodyTimeout (30s) of its headers, and a
// kept-alive connection is closed after HTTPIdleTimeout (2m) without a
// request. The body deadline is set per request that has a body and
// cleared once the body is read, so the SSE stream a POST answers with,
// and a WebSocket, last as long as their turn (they keep their own
// keepalives). At most HTTPMaxConns (4096) connections are open at once;
// past it a connection is answered 503 with Retry-After and closed before
// any handler runs (forever_http_connections_open,
// forever_http_connections_refused_total), except a probe (GET /healthz or
// /readyz), which is answered, so idle connections cannot fail a liveness
// probe. Every response carries the framing headers (frames.go):
// Content-Security-Policy frame-ancestors 'self' plus FrameAncestors, and
// X-Frame-Options: DENY without them.
//
// # NATS denials
//
// The embedded server logs every client it refuses (a permissions
// violation, a failed or revoked authentication, an account's connection,
// subscription or payload limit). agentd counts them
// (forever_nats_denials_total{kind}), passes each to the function given to
// Daemon.OnNATSDenial (the audit log), and logs at most one line per kind a
// second, saying how many it left out since the last: a client making
// 20,000 forbidden publishes in 2 s costs a few lines, not 20,000.
//
// # Encryption at rest
//
// With Config.EncryptionKeyFile (--encryption-key-file) the embedded server
// encrypts its JetStream store (JetStreamKey, JetStreamCipher: ChaCha20-
// Poly1305 or AES-GCM, --encryption-cipher): every stream's messages and
// index, the KV buckets (leases, tenant registry), consumers' state and the
// stream metadata, tenants' included. A store written without a key is
// encrypted at the next start with one. A start with another key, or with
// none on an encrypted store, fails with ErrConfig naming the flag, before
// anything is written (the server would skip the streams it cannot read and
// agentd would create them anew). Not covered: the Pebble views under
// <data>/pebble and <data>/tenants/*/pebble (derived from the log, rebuilt
// from it when deleted: keep --data on an encrypted volume, or delete them
// and let them rebuild), the key files under <data>/auth and admin.creds
// (0600), the key itself (keep the file out of --data, on a secret mount),
// and an external server's store (--nats-url: its own jetstream block).
//
// # Invariants
//
//   - Nothing is kept at package level: two Daemons with different data
//     dirs, ports and registries can run in one process (the tests do).
//   - Run returns only after every goroutine it started has returned and
//     every resource it opened is closed; the data dir can be opened again.
//   - With SyncAlways (the default) an acknowledged JetStream write survives
//     power failure; with SyncInterval it may not, and Run logs a warning.
//   - A Config field gets its default in one place, Config.SetDefaults, or
//     has none, or a zero with a meaning of its own that its doc states
//     (TestConfigFieldsListed lists each field as one of the three).
//     Validate runs one table of checks (Config.checks, config.go) in a
//     fixed order: a config with several mistakes names the same one first.
//
// # Usage
//
//	cfg, err := agentd.ParseFlags(os.Args[1:], os.Getenv) // flag > FOREVER_* > default
//	cfg.Logger = logger
//	cfg.Registerer, cfg.Gatherer = reg, reg
//	d, err := agentd.New(cfg)
//	d.OnStart(func(ctx context.Context, deps *agentd.Deps) error {
//		pr, err := deps.Log.NewProjector(myProjection)
//		if err != nil {
//			return err
//		}
//		d.Handle("GET /v1/things", thingsHandler(deps.Log))
//		d.Add("worker", agentd.ComponentFunc(myWorker.Run))
//		return d.AddProjector(pr)
//	})
//	err = d.Run(ctx) // until ctx is done (SIGINT/SIGTERM in main)
package agentd
