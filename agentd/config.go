package agentd

import (
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/forever-agents/forever/auth"
	"github.com/forever-agents/forever/chat/cost"
	"github.com/forever-agents/forever/keepalive"
	"github.com/forever-agents/forever/replay"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/forever-agents/forever/mcptools"
	"github.com/forever-agents/forever/modellimit"
	"github.com/forever-agents/forever/ownership"
)

// Sync modes of the embedded server's JetStream file store.
const (
	// SyncAlways fsyncs every JetStream write before it is acknowledged.
	SyncAlways = "always"
	// SyncInterval fsyncs on the server's default interval (2 minutes): an
	// acknowledged write can be lost on power failure.
	SyncInterval = "interval"
)

// Log formats accepted in Config.LogFormat.
const (
	LogText = "text"
	LogJSON = "json"
)

// Defaults for Config fields left zero.
const (
	DefaultDataDir            = "./data"
	DefaultNATSListen         = "127.0.0.1:4222"
	DefaultSync               = SyncAlways
	DefaultHTTPAddr           = "127.0.0.1:8080"
	DefaultJetStreamMaxMemory = 256 << 20 // 256 MiB
	DefaultJetStreamMaxStore  = 10 << 30  // 10 GiB
	DefaultChunkMaxAge        = 24 * time.Hour
	// DefaultAgentEventsMax and DefaultAgentEventsMaxAge bound what the
	// agent events stream keeps of each agent's broadcasts and state
	// changes: its newest 1,000, for a day.
	DefaultAgentEventsMax    = 1000
	DefaultAgentEventsMaxAge = 24 * time.Hour
	DefaultIdleTimeout       = 2 * time.Minute
	// DefaultMaxTurns bounds the chat turns running at once on a node.
	DefaultMaxTurns = 1000

	ProviderLocal           = "local"
	ProviderOpenAI          = "openai"
	ProviderChatCompletions = "chatcompletions"
	ProviderAnthropic       = "anthropic"
	DefaultShutdownTimeout  = 10 * time.Second
	DefaultLogFormat        = LogText

	DefaultClusterName = "forever"
	DefaultPartitions  = ownership.DefaultPartitions
	DefaultLeaseTTL    = ownership.DefaultTTL
)

// Subdirectories of the data dir.
const (
	// JetStreamSubdir holds the embedded server's JetStream store. nats-server
	// appends it to its StoreDir itself, so the server is given DataDir.
	JetStreamSubdir = "jetstream"
	// PebbleSubdir holds the Pebble projections.
	PebbleSubdir = "pebble"
)

// Config configures a Daemon. A zero field means "use the default"; New
// applies the defaults and calls Validate. ParseFlags builds one from
// command-line flags and FOREVER_* environment variables.
type Config struct {
	// DataDir holds everything agentd stores: <DataDir>/jetstream (the
	// embedded server's JetStream store) and <DataDir>/pebble (projections).
	// It is created when missing. Default "./data".
	DataDir string
	// PebbleFS is the filesystem Pebble keeps <DataDir>/pebble on; nil is
	// the OS's. Tests inject faults through it (a full disk). Not a flag.
	PebbleFS vfs.FS
	// NATSURL connects to an external NATS server instead of running the
	// embedded one. Empty (the default) runs the embedded server; NATSListen,
	// Sync and the JetStream limits then apply to it.
	NATSURL string
	// NATSListen is the host:port the embedded server listens on, so other
	// clients can connect. Port 0 picks a free port. Default 127.0.0.1:4222.
	NATSListen string
	// Sync is the embedded server's JetStream sync mode: SyncAlways (the
	// default) or SyncInterval.
	Sync string
	// HTTPAddr is the host:port of the HTTP server (/metrics, /healthz,
	// /readyz and handlers added with Daemon.Handle). Port 0 picks a free
	// port. Default 127.0.0.1:8080.
	HTTPAddr string
	// JetStreamMaxMemory and JetStreamMaxStore limit the embedded server's
	// JetStream memory and file storage, in bytes. Defaults 256 MiB and
	// 10 GiB.
	JetStreamMaxMemory, JetStreamMaxStore int64
	// ChunkMaxAge is how long a chat stream's chunks are kept after the
	// stream ended; AttachRetention's sweep then purges them. The chunks
	// stream's MaxAge is a safety cap at eventlog.DefaultChunkSafetyFactor
	// times this. Default 24h.
	ChunkMaxAge time.Duration
	// AgentEventsMax and AgentEventsMaxAge bound the stored agent events
	// (broadcasts and state changes, resumable from a cursor on GET
	// /v1/agents/{id}/events): at most AgentEventsMax per agent, none older
	// than AgentEventsMaxAge. Defaults DefaultAgentEventsMax and
	// DefaultAgentEventsMaxAge.
	AgentEventsMax    int
	AgentEventsMaxAge time.Duration
	// MaxTurns bounds the chat turns running at once on this node: past
	// it a new turn is refused at once with 429 and Retry-After (recovered turns are
	// always admitted). Default 1000; negative: no limit.
	MaxTurns int
	// BlobThreshold is the size in bytes above which a chat payload (a
	// message part's text, a tool input or output, a data part) is
	// stored once in the FOREVER_BLOBS Object Store bucket by its SHA-256
	// digest and the event holds the reference. 0: 256 KiB; negative:
	// never (payloads stay in the events, split in parts).
	BlobThreshold int
	// BlobGrace is how long an object of the FOREVER_BLOBS bucket that
	// no stored event names any more (its agents were deleted) is kept
	// after it was last stored; then the blob sweeper, on the owner of
	// partition 0, deletes it. 0: 1h; negative: never delete.
	BlobGrace time.Duration
	// ContextTokens is the chat agents' context budget in tokens
	// (estimated at four bytes a token): past it, a model call gets the
	// system prompt, a summary of the older messages and the newest
	// messages that fit (chat.Config.ContextTokens). 0: the provider's
	// default (100000 for openai and chatcompletions, 150000 for
	// anthropic, none for local); negative: none, the whole conversation.
	ContextTokens int
	// IdleTimeout is how long an agent stays active without work before the
	// host deactivates it. Default 2m.
	IdleTimeout time.Duration
	// AgentVersion is the version of the built-in agent types' code
	// ("": the binary's build), and VersionPolicy what a node does with
	// a turn or fiber another version started: continue (""), restart or
	// fail (host.SetVersion).
	AgentVersion, VersionPolicy string
	// ScheduleTimeout is how long a schedule callback may run before it is
	// treated as hung: its context is cancelled and the attempt retried
	// with backoff. Default keepalive.DefaultCallbackTimeout (30s), as
	// the Cloudflare design resets a hung callback.
	ScheduleTimeout time.Duration
	// CompactEvents and CompactBytes stored since an agent's last snapshot
	// make the agent's owner compact it (package compaction); an agent
	// that goes idle is compacted past CompactIdleEvents. Defaults
	// compaction.DefaultEvents (10000), DefaultBytes (8 MiB) and
	// DefaultIdleEvents (256); negative CompactEvents turns compaction off.
	CompactEvents, CompactBytes, CompactIdleEvents int64
	// CompactEvery is how often the compactor sweeps the agents this node
	// owns for those past CompactEvents or CompactBytes. Default
	// compaction.DefaultEvery (30s).
	CompactEvery time.Duration
	// MaxStreamConsumers caps the consumers of each of the log's streams
	// (eventlog.Config.MaxConsumers): each client following a chat stream
	// holds one. 0: the server's default (1,000 since nats-server 2.15).
	MaxStreamConsumers int
	// Provider is the model behind chat agents: local (built in, no
	// network), openai (Responses API), chatcompletions (OpenAI-compatible:
	// Ollama, llama.cpp, vLLM) or anthropic. Default local.
	Provider string
	// Model is the provider's model name (required for remote providers).
	Model string
	// ProviderURL is the provider's base URL (required for chatcompletions
	// servers other than OpenAI's).
	ProviderURL string
	// LocalRate is the local model's speed in tokens/s: 0 means the default
	// (30), negative as fast as possible.
	LocalRate float64
	// ModelLimit and ModelTokenLimit bound the chat model's calls and
	// tokens, cluster-wide (each node takes its share: 1 / the live
	// nodes), shared between the tenants by their model weight
	// (auth.Quota.ModelWeight) with package modellimit. Zero: no bound;
	// a provider's 429 still pauses every tenant's calls.
	ModelLimit, ModelTokenLimit modellimit.Rate
	// LocalModelLimit makes the local model answer 429 with Retry-After
	// past this many calls per period, as a provider over its limit does
	// (demos and tests of the limiter). Zero: no limit.
	LocalModelLimit modellimit.Rate
	// Prices is a JSON file of model prices set over the built-in ones
	// (chat/cost): {"<provider>": {"<model>": {"input": "2.50",
	// "output": "10.00", "cached": "1.25"}}}, dollars per million tokens.
	// Empty: the built-in prices.
	Prices string
	// UserBudget is the node's per-user budget (its UserTokens and
	// UserCost; --user-token-budget, --user-cost-budget): a limit on the
	// spend of each user's chat agents together. Under Auth it is the
	// default of a tenant whose record sets none.
	UserBudget auth.Budget
	// ShutdownTimeout bounds each step of the graceful shutdown (HTTP
	// requests in flight, NATS drain). Default 10s.
	ShutdownTimeout time.Duration
	// LogLevel is the minimum level logged; the zero value is info. The
	// embedded server's debug lines are routed only at debug level.
	LogLevel slog.Level
	// LogFormat is LogText (the default) or LogJSON; main uses it to build
	// Logger.
	LogFormat string

	// ServerName names this node and its embedded NATS server; unique in a
	// cluster. The status verb reports the owner of an agent by this name.
	// Default: the host name.
	ServerName string
	// ClusterName makes the embedded server join a NATS cluster of that
	// name (with ClusterListen). Default "forever" when ClusterListen is set.
	ClusterName string
	// ClusterListen is the host:port the embedded server accepts routes on.
	// Empty: not clustered.
	ClusterListen string
	// Routes are the peers' route URLs (nats-route://host:port, or
	// host:port), or one DNS name that resolves to every peer.
	Routes []string
	// Replicas of the streams and KV buckets Forever creates. 0 picks 3 when
	// clustered (the embedded server with ClusterListen, or an external
	// server that reports a cluster), 1 otherwise.
	Replicas int
	// Partitions is the number of agent partitions, fixed when the cluster
	// is first started. Default DefaultPartitions.
	Partitions int
	// Shards is the number of stream shards of each kind (events, chunks),
	// fixed when the cluster is first started: partition p's events and
	// chunks go to shard p mod Shards, each shard a stream of its own (its
	// own Raft group). 1 is the unsharded layout of earlier releases (one
	// stream of each kind); 0, the default, takes the count the cluster
	// stored, and creates a new cluster on a cluster of servers with
	// DefaultShards (8 with the default partitions), a new one on a single
	// server unsharded; above 1, Partitions must be a multiple
	// (docs/architecture.md, "Shards").
	Shards int
	// AllViews makes every node of a sharded cluster project every
	// partition, as the nodes of an unsharded one do (--owned-views=false).
	// Zero (the default): a node of a sharded cluster (its shard count,
	// given or stored, above 1) projects only the partitions it owns
	// (eventlog.Config.OwnedViews): its views follow a partition from its
	// acquisition, catching it up first, to its release; reads of an
	// agent's views go to its owner and the agents listing asks the owners
	// (docs/architecture.md, "Views of a sharded cluster"). A per-user
	// budget (UserBudget) keeps every view: the spend of a user's agents
	// is read from every partition.
	AllViews bool
	// PackChunks lets a turn store the chunks it writes together as one
	// record (chunk.EventChunks), once the cluster's active format reached
	// FormatChunkBatches: fewer fsyncs a tool call, and chunk cursors
	// inside such a record read "<sequence>.<k>" where they were digits
	// only. Every node of this release reads packed records whether or
	// not it writes them. Experimental: off by default, so the wire's
	// cursors stay digits until clients take the dotted form.
	PackChunks bool
	// LeaseTTL is the partition lease TTL: how long a dead owner keeps its
	// agents before another node takes them. Default DefaultLeaseTTL.
	LeaseTTL time.Duration

	// MCP lists the MCP servers whose tools agentd's chat agents get, one
	// spec each as mcptools.ParseServer reads it: "name=command args..."
	// (a stdio server run as a subprocess, the rest split on whitespace)
	// or "name=https://..." / "name=http://..." (a streamable HTTP server).
	// Names match ^[a-zA-Z0-9_-]+$, contain no "__" and are unique; the
	// tools are named "<name>__<tool>". See MCPServers.
	MCP []string

	// CORSOrigins are the browser origins, besides agentd's own, allowed to
	// call the HTTP gateway and open its WebSocket (replay.GatewayConfig's
	// AllowedOrigins): "https://app.example.com", "*.example.com",
	// "localhost:*", or "*" for any. Empty: same-origin only; another
	// origin gets 403.
	CORSOrigins []string

	// AllowedHosts are the Host headers the HTTP server answers besides
	// loopback ones (--allowed-host, replay.ParseHostPattern's patterns:
	// "app.example.com", "*.example.com", "10.0.0.5:8080"). Without Auth
	// every other Host gets 403 before any handler runs, so a web page on
	// another site cannot reach a local agentd through DNS rebinding; with
	// Auth the check applies only when the list is set. /healthz and
	// /readyz answer any Host: probes address a pod by its IP.
	AllowedHosts []string
	// FrameAncestors (--frame-ancestors) are the origins whose pages may
	// frame agentd's ("https://portal.example.com", "https://*.example.com"),
	// besides its own: every response says so in Content-Security-Policy
	// frame-ancestors. Empty: only agentd's own pages may, and responses
	// also carry X-Frame-Options: DENY for browsers without CSP (see
	// frames.go).
	FrameAncestors []string

	// TLSCert and TLSKey (--tls-cert, --tls-key) turn TLS on for HTTP, the
	// embedded server's client port and its routes; they are read again on
	// SIGHUP (Daemon.ReloadTLS). TLSCA (--tls-ca) verifies the routes' peers
	// (mutual TLS, required clustered) and, with --nats-url, that server.
	TLSCert, TLSKey, TLSCA string

	// NATSCreds is a NATS creds file for the connection to NATSURL
	// (--nats-creds): an account's user on a server with accounts.
	NATSCreds string

	// Auth turns tenants on (--auth): the embedded server runs in NATS
	// operator mode, every client needs a credential, and HTTP needs a
	// bearer token. A non-loopback listen needs it, or Insecure.
	Auth bool
	// AuthSecretFile (--auth-secret-file) names a file holding a secret
	// of at least 32 bytes shared by a cluster's nodes; the operator's keys
	// are derived from it. Required for Auth clustered; without it the keys
	// are random, under <data>/auth.
	AuthSecretFile string
	// Insecure (--insecure) allows a non-loopback listen without auth.
	Insecure bool
	// OIDCIssuer, OIDCAudience and OIDCTenantClaim (--oidc-*) accept JWTs
	// from an OIDC issuer as HTTP bearer tokens, verified against its JWKS;
	// the claim names the tenant. Needs Auth.
	OIDCIssuer      string
	OIDCAudience    string
	OIDCTenantClaim string
	// Tenant is set on a tenant's daemon (package tenancy runs one per
	// tenant): it runs inside the daemon that serves the tenants, in the
	// tenant's account of that daemon's NATS server, without a server or
	// HTTP listener of its own. Not a flag.
	Tenant *TenantLink
	// Quota is a tenant daemon's quota: its host refuses commands over
	// it (Deps.Quotas). Not a flag.
	Quota auth.Quota

	// HTTPReadHeaderTimeout bounds reading a request's headers and a TLS
	// handshake (--http-read-header-timeout); HTTPBodyTimeout reading its
	// body, from the end of the headers (--http-body-timeout);
	// HTTPIdleTimeout how long a kept-alive connection waits for its next
	// request (--http-idle-timeout). SSE streams and WebSockets are not
	// bounded by them: they keep their own keepalives. Defaults 10s, 30s,
	// 2m.
	HTTPReadHeaderTimeout, HTTPBodyTimeout, HTTPIdleTimeout time.Duration
	// HTTPMaxConns bounds the HTTP connections open at once
	// (--http-max-conns): past it a connection is answered 503 with
	// Retry-After and closed. Default 4096.
	HTTPMaxConns int
	// MetricsListen (--metrics-listen) serves /metrics on a listener of
	// its own, and no longer on the HTTP port. Empty: with Auth,
	// DefaultAuthMetricsListen (the series name every tenant, so they are
	// kept off the tenants' port); without, /metrics on HTTPAddr.
	MetricsListen string
	// Pprof (--pprof) serves Go's profiles (net/http/pprof) under
	// /debug/pprof/ on the MetricsListen listener, which it requires.
	// Default false.
	Pprof bool
	// EncryptionKeyFile (--encryption-key-file) names a file holding a key
	// of at least MinEncryptionKey bytes with which the embedded server
	// encrypts its JetStream store at rest (JetStreamKey), with
	// EncryptionCipher (--encryption-cipher: CipherChaCha, the default, or
	// CipherAES). The Pebble views are not encrypted.
	EncryptionKeyFile, EncryptionCipher string
	// TenantDefaults is the quota of a tenant whose record leaves a field
	// zero (--tenant-default-*): with Auth every tenant is bounded unless
	// created with auth.Unlimited. Zero fields take the built-in defaults
	// (DefaultTenant*; bytes and memory 1/8 of the node's JetStream
	// limits). Set the same on every node of a cluster.
	TenantDefaults auth.Quota
	// OIDCRoleClaim (--oidc-role-claim) names the OIDC claim holding a
	// token's role (auth.Role); a token without it is a reader. Empty:
	// every OIDC token is a writer.
	OIDCRoleClaim string
	// AuditMaxAge and AuditMaxBytes (--audit-max-age, --audit-max-bytes)
	// bound the audit log that Auth keeps (package agentd/audit): 30 days,
	// and by default 1/16 of JetStreamMaxStore, at most 256 MiB
	// (AuditBytes).
	AuditMaxAge   time.Duration
	AuditMaxBytes int64
	// AuditCommand, when set, receives each command that may change an
	// agent once answered; package tenancy sets it on its tenants'
	// daemons to write the audit log. Not a flag.
	AuditCommand AuditFunc
	// CommandActor, when set, names who sent a NATS command from its
	// headers (a verified auth.HeaderActor), for the audit log and the
	// verb's role check; package tenancy sets it on its tenants' daemons.
	// Not a flag.
	CommandActor func(nats.Header) (auth.Identity, bool)
	// TracerProvider traces what agentd does with OpenTelemetry: commands,
	// turns (invoke_agent), provider calls (chat), tool calls
	// (execute_tool), fiber steps and recoveries, partition moves. Nil:
	// tracing is off and costs nothing. main builds it from the OTEL_*
	// variables (package tracing/otelenv). Not a flag.
	TracerProvider trace.TracerProvider
	// TraceContent (--trace-content) records message contents in spans:
	// prompts, answers, tool arguments and results. Off by default: they
	// hold user data, and spans go to a tracing backend, often a third
	// party's, with its own retention and access rules.
	TraceContent bool
	// TrustTraceparent (--trust-traceparent) makes the W3C traceparent of
	// a client's request (an HTTP request, a NATS command) the parent of
	// the span agentd starts for it. Off by default: the span starts a
	// trace of its own with a link to the client's span, so a client can
	// neither pick the trace its work is recorded in nor force sampling.
	// Turn it on when the clients are the operator's own services.
	TrustTraceparent bool

	// Logger receives all log lines. Default slog.Default().
	Logger *slog.Logger
	// Registerer receives the metrics and Gatherer serves them on /metrics.
	// When both are nil, New creates a registry with the Go and process
	// collectors. When only one is set, the other must be set as well.
	Registerer prometheus.Registerer
	Gatherer   prometheus.Gatherer
}

// SetDefaults fills the zero fields with their defaults. It is the one
// place a Config field gets a default; a field it leaves zero either has
// no default (off, empty) or its zero value means something its package
// decides ("0: 256 KiB"), as the field's doc says. config_test.go lists
// every field as one or the other.
func (c *Config) SetDefaults() {
	// Storage and the embedded server.
	setDefault(&c.DataDir, DefaultDataDir)
	setDefault(&c.NATSListen, DefaultNATSListen)
	setDefault(&c.Sync, DefaultSync)
	setDefault(&c.JetStreamMaxMemory, DefaultJetStreamMaxMemory)
	setDefault(&c.JetStreamMaxStore, DefaultJetStreamMaxStore)
	setDefault(&c.ChunkMaxAge, DefaultChunkMaxAge)
	setDefault(&c.AgentEventsMax, DefaultAgentEventsMax)
	setDefault(&c.AgentEventsMaxAge, DefaultAgentEventsMaxAge)

	// Agents and chat.
	setDefault(&c.IdleTimeout, DefaultIdleTimeout)
	setDefault(&c.ScheduleTimeout, keepalive.DefaultCallbackTimeout)
	setDefault(&c.MaxTurns, DefaultMaxTurns)
	setDefault(&c.Provider, ProviderLocal)

	// The process.
	setDefault(&c.ShutdownTimeout, DefaultShutdownTimeout)
	setDefault(&c.LogFormat, DefaultLogFormat)
	setDefault(&c.Logger, slog.Default())

	// The cluster.
	if c.ServerName == "" {
		c.ServerName, _ = os.Hostname()
	}
	if c.ClusterName == "" && c.ClusterListen != "" {
		c.ClusterName = DefaultClusterName
	}
	setDefault(&c.Partitions, DefaultPartitions)
	setDefault(&c.LeaseTTL, DefaultLeaseTTL)

	// The HTTP server and its limits (httpserver.go).
	setDefault(&c.HTTPAddr, DefaultHTTPAddr)
	setDefault(&c.HTTPReadHeaderTimeout, DefaultHTTPReadHeaderTimeout)
	setDefault(&c.HTTPBodyTimeout, DefaultHTTPBodyTimeout)
	setDefault(&c.HTTPIdleTimeout, DefaultHTTPIdleTimeout)
	setDefault(&c.HTTPMaxConns, DefaultHTTPMaxConns)

	// A tenant's quota (tenantdefaults.go), but for bytes and memory,
	// which follow the node's JetStream limits (TenantQuota).
	d := &c.TenantDefaults
	setDefault(&d.Rate, DefaultTenantRate)
	setDefault(&d.Turns, DefaultTenantTurns)
	setDefault(&d.Agents, DefaultTenantAgents)
	setDefault(&d.Conns, DefaultTenantConns)
	setDefault(&d.Subs, DefaultTenantSubs)
	setDefault(&d.Payload, DefaultTenantPayload)
	setDefault(&d.Streams, DefaultTenantStreams)
	setDefault(&d.Consumers, DefaultTenantConsumers)

	// The audit log (auditconfig.go); its byte bound follows
	// JetStreamMaxStore (AuditBytes).
	setDefault(&c.AuditMaxAge, DefaultAuditMaxAge)
}

// setDefault sets *v to def when it is zero.
func setDefault[T comparable](v *T, def T) {
	var zero T
	if *v == zero {
		*v = def
	}
}

// Validate checks the config after defaults are applied. Errors wrap
// ErrConfig and name the flag to change. It runs checks in their order
// and returns the first error, so a config with several mistakes is told
// of the same one each time.
func (c *Config) Validate() error {
	for _, check := range c.checks() {
		if err := check(); err != nil {
			return err
		}
	}
	return nil
}

// checks are Validate's checks, one per concern, in the order they run;
// the comment names the file each lives in and the flags it checks.
func (c *Config) checks() []func() error {
	return []func() error{
		c.validateModes,           // config.go: --sync, --log-format, --provider
		c.validateSpend,           // config.go: --prices, --user-token-budget
		c.validateAddrs,           // config.go: --http, --version-policy, --nats-listen
		c.validateNonNegative,     // config.go: sizes, counts and durations
		c.validateShards,          // shards.go: --shards
		c.validateHTTP,            // httpserver.go: --http-* limits
		c.validateFrameAncestors,  // frames.go: --frame-ancestors
		c.validateMetrics,         // metrics_listen.go: --metrics-listen
		c.validateEncryption,      // encryption.go: --encryption-*
		c.validateTenantDefaults,  // tenantdefaults.go: --tenant-default-*
		c.validateAudit,           // auditconfig.go: --audit-*
		c.validateCluster,         // cluster.go: --server-name, --cluster-*, --routes, --replicas, --partitions, --lease-ttl
		c.validateAuth,            // auth.go: --auth, --insecure, --nats-creds, --oidc-*
		c.validateTLS,             // tls.go: --tls-*
		c.validateMCP,             // config.go: --mcp
		c.validateHosts,           // config.go: --allowed-host
		c.validateMetricsRegistry, // config.go: Registerer and Gatherer
	}
}

// validateModes checks the fields that take one of a few words.
func (c *Config) validateModes() error {
	switch c.Sync {
	case SyncAlways, SyncInterval:
	default:
		return configErrorf("sync", "sync mode %q is not %q or %q", c.Sync, SyncAlways, SyncInterval)
	}
	switch c.LogFormat {
	case LogText, LogJSON:
	default:
		return configErrorf("log-format", "log format %q is not %q or %q", c.LogFormat, LogText, LogJSON)
	}
	switch c.Provider {
	case ProviderLocal, ProviderOpenAI, ProviderChatCompletions, ProviderAnthropic:
	default:
		return configErrorf("provider", "provider %q is not one of local, openai, chatcompletions, anthropic", c.Provider)
	}
	return nil
}

// validateSpend checks the prices file and the per-user budget.
func (c *Config) validateSpend() error {
	if _, err := cost.Load(c.Prices); err != nil {
		return configErrorf("prices", "prices file %s: %s", c.Prices, strings.TrimPrefix(err.Error(), "cost: "))
	}
	if err := c.UserBudget.Validate(); err != nil {
		return configErrorf("user-token-budget", "%s", strings.TrimPrefix(err.Error(), "auth: "))
	}
	return nil
}

// validateAddrs checks the HTTP address, the version policy and, for the
// embedded server, its listen address.
func (c *Config) validateAddrs() error {
	if _, _, err := splitAddr(c.HTTPAddr); err != nil {
		return configErrorf("http", "http address %q: %v", c.HTTPAddr, err)
	}
	switch c.VersionPolicy {
	case "", "continue", "restart", "fail":
	default:
		return configErrorf("version-policy", "version policy %q: want continue, restart or fail", c.VersionPolicy)
	}
	if c.NATSURL == "" {
		if _, _, err := splitAddr(c.NATSListen); err != nil {
			return configErrorf("nats-listen", "nats listen address %q: %v", c.NATSListen, err)
		}
	}
	return nil
}

// validateNonNegative refuses a negative size, count or duration where
// only zero (the default) has a meaning below one.
func (c *Config) validateNonNegative() error {
	for _, f := range []struct {
		flag string
		v    int64
	}{
		{"js-max-memory", c.JetStreamMaxMemory},
		{"js-max-store", c.JetStreamMaxStore},
		{"chunk-max-age", int64(c.ChunkMaxAge)},
		{"agent-events-max", int64(c.AgentEventsMax)},
		{"agent-events-max-age", int64(c.AgentEventsMaxAge)},
		{"idle-timeout", int64(c.IdleTimeout)},
		{"schedule-timeout", int64(c.ScheduleTimeout)},
		{"compact-bytes", c.CompactBytes},
		{"compact-idle-events", c.CompactIdleEvents},
		{"compact-every", int64(c.CompactEvery)},
		{"max-stream-consumers", int64(c.MaxStreamConsumers)},
		{"shutdown-timeout", int64(c.ShutdownTimeout)},
	} {
		if f.v < 0 {
			return configErrorf(f.flag, "%s must not be negative", f.flag)
		}
	}
	return nil
}

// validateMCP checks the --mcp specs (MCPServers).
func (c *Config) validateMCP() error {
	_, err := c.MCPServers()
	return err
}

// validateHosts checks the --allowed-host patterns.
func (c *Config) validateHosts() error {
	if _, err := replay.ParseHostPatterns(c.AllowedHosts); err != nil {
		return configErrorf("allowed-host", "%v", err)
	}
	return nil
}

// validateMetricsRegistry refuses a Registerer without a Gatherer, or
// the other way round.
func (c *Config) validateMetricsRegistry() error {
	if (c.Registerer == nil) != (c.Gatherer == nil) {
		return fmt.Errorf("%w: Registerer and Gatherer must be set together", ErrConfig)
	}
	return nil
}

// MCPServers parses MCP. Errors wrap ErrConfig and
// mcptools.ErrInvalidServer and name --mcp and the bad value.
func (c *Config) MCPServers() ([]mcptools.Server, error) {
	servers := make([]mcptools.Server, 0, len(c.MCP))
	seen := make(map[string]bool, len(c.MCP))
	for _, spec := range c.MCP {
		s, err := mcptools.ParseServer(spec)
		if err == nil && seen[s.Name] {
			err = fmt.Errorf("%w: server name %q is used twice", mcptools.ErrInvalidServer, s.Name)
		}
		if err != nil {
			reason := strings.TrimPrefix(err.Error(), mcptools.ErrInvalidServer.Error()+": ")
			return nil, newFlagError(ErrConfig, err, "mcp", fmt.Sprintf("invalid --mcp value %q: %s", spec, reason))
		}
		seen[s.Name] = true
		servers = append(servers, s)
	}
	return servers, nil
}

// JetStreamDir returns where the embedded server stores JetStream data.
func (c *Config) JetStreamDir() string { return filepath.Join(c.DataDir, JetStreamSubdir) }

// PebbleDir returns where Pebble keeps the projections.
func (c *Config) PebbleDir() string { return filepath.Join(c.DataDir, PebbleSubdir) }

// splitAddr parses host:port; port must be a number in [0, 65535].
func splitAddr(addr string) (host string, port int, err error) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	port, err = strconv.Atoi(p)
	if err != nil || port < 0 || port > 65535 {
		return "", 0, fmt.Errorf("port %q is not a number from 0 to 65535", p)
	}
	return host, port, nil
}
