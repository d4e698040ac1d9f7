package agentd

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"

	"github.com/forever-agents/forever/modellimit"
)

// ParseFlags builds a Config from command-line arguments (without the
// program name) and environment variables read through getenv: a flag beats
// its FOREVER_* variable, which beats the default. Every flag --x-y has the
// variable FOREVER_X_Y. The returned Config has its defaults applied and is
// valid; Logger, Registerer and Gatherer are left nil for the caller to set.
//
// Errors: flag.ErrHelp for -h or --help (print Usage then), or an error
// wrapping ErrConfig that names the bad flag or variable.
func ParseFlags(args []string, getenv func(string) string) (Config, error) {
	var cfg Config
	cfg.SetDefaults()
	cfg.Logger = nil
	fs := newFlagSet(&cfg)
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		env := envName(f.Name)
		v := getenv(env)
		if v == "" || err != nil {
			return
		}
		if serr := fs.Set(f.Name, v); serr != nil {
			err = newFlagError(ErrConfig, serr, f.Name, fmt.Sprintf("%s=%q: %v", env, v, serr))
		}
	})
	if err != nil {
		return Config{}, err
	}
	// A repeatable flag given on the command line replaces, rather than
	// adds to, what its variable set.
	fs.VisitAll(func(f *flag.Flag) {
		if r, ok := f.Value.(*repeatedFlag); ok {
			r.fromEnv = true
		}
	})
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return Config{}, err
		}
		return Config{}, &flagError{msg: fmt.Sprintf("agentd: %v (run 'agentd -h' for the flags)", FlagError(err)), kind: ErrConfig, cause: err}
	}
	if fs.NArg() > 0 {
		return Config{}, &flagError{msg: fmt.Sprintf("agentd: unexpected argument %q: the daemon takes flags only (run 'agentd help' for the commands)", fs.Arg(0)), kind: ErrConfig}
	}
	if err := cfg.Validate(); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

// Usage writes the flags, their environment variables and defaults to w.
func Usage(w io.Writer) {
	var cfg Config
	cfg.SetDefaults()
	fs := newFlagSet(&cfg)
	fmt.Fprintf(w, "Usage: agentd [flags]\n\nagentd runs Forever: durable AI agents on NATS JetStream.\n"+
		"Each flag --x-y can also be set with the environment variable FOREVER_X_Y;\n"+
		"a flag beats its variable, which beats the default.\n\nFlags:\n")
	fs.SetOutput(w)
	fs.PrintDefaults()
}

// newFlagSet defines every flag on cfg, whose current values are the
// defaults shown in the usage text.
func newFlagSet(cfg *Config) *flag.FlagSet {
	fs := flag.NewFlagSet("agentd", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&cfg.DataDir, "data", cfg.DataDir,
		"data `dir`: JetStream store in <dir>/jetstream, projections in <dir>/pebble")
	fs.StringVar(&cfg.NATSURL, "nats-url", cfg.NATSURL,
		"connect to this external NATS `url` instead of running the embedded server")
	fs.StringVar(&cfg.NATSListen, "nats-listen", cfg.NATSListen,
		"`host:port` the embedded NATS server listens on (port 0 picks a free port)")
	fs.StringVar(&cfg.Sync, "sync", cfg.Sync,
		"JetStream sync `mode` of the embedded server: always (fsync every write) or interval (faster; acknowledged writes can be lost on power failure)")
	fs.StringVar(&cfg.HTTPAddr, "http", cfg.HTTPAddr,
		"`host:port` of the HTTP server: /metrics, /healthz, /readyz (port 0 picks a free port)")
	fs.Var((*byteSize)(&cfg.JetStreamMaxMemory), "js-max-memory",
		"JetStream memory storage limit of the embedded server (`size`: bytes, or with K, M, G, T; KiB, MiB... are the same)")
	fs.Var((*byteSize)(&cfg.JetStreamMaxStore), "js-max-store",
		"JetStream file storage limit of the embedded server (`size`)")
	fs.StringVar(&cfg.ServerName, "server-name", cfg.ServerName,
		"`name` of this node and its embedded NATS server, unique in the cluster (default: the host name)")
	fs.StringVar(&cfg.ClusterName, "cluster-name", cfg.ClusterName,
		"`name` of the NATS cluster the embedded server joins (default \""+DefaultClusterName+"\" with --cluster-listen)")
	fs.StringVar(&cfg.ClusterListen, "cluster-listen", cfg.ClusterListen,
		"`host:port` the embedded server accepts cluster routes on; set to run clustered")
	fs.Var((*listFlag)(&cfg.Routes), "routes",
		"comma-separated route `urls` of the cluster's nodes (nats-route://host:port or host:port), or one DNS name that resolves to every node")
	fs.IntVar(&cfg.Replicas, "replicas", cfg.Replicas,
		"replicas of the streams and KV buckets (0: 3 when clustered, 1 otherwise)")
	fs.IntVar(&cfg.Partitions, "partitions", cfg.Partitions,
		"number of agent partitions, fixed when the cluster is first started")
	fs.IntVar(&cfg.Shards, "shards", cfg.Shards,
		"number of stream shards of events and chunks, each its own Raft group, fixed when the cluster is first started (0: the cluster's stored count; a new cluster gets 8 when clustered, one stream each on a single server; 1: one stream each; --partitions must be a multiple)")
	fs.Var(notFlag{&cfg.AllViews}, "owned-views",
		"in a sharded cluster (--shards above 1), each node projects only the partitions it owns; false: every node projects every partition")
	fs.BoolVar(&cfg.PackChunks, "pack-chunks", cfg.PackChunks,
		"store the chunks a turn writes together as one record once every node reads them (record format 7); chunk cursors may then read <sequence>.<k> (experimental)")
	fs.DurationVar(&cfg.LeaseTTL, "lease-ttl", cfg.LeaseTTL,
		"partition lease TTL: how long agents of a dead node wait before another node takes them")
	fs.DurationVar(&cfg.ChunkMaxAge, "chunk-max-age", cfg.ChunkMaxAge,
		"how long a chat stream's chunks are kept after the stream ended (10x this caps even a streaming turn)")
	fs.IntVar(&cfg.AgentEventsMax, "agent-events-max", cfg.AgentEventsMax,
		"how many of each agent's broadcasts and state changes are kept, resumable from a cursor on /v1/agents/{id}/events")
	fs.DurationVar(&cfg.AgentEventsMaxAge, "agent-events-max-age", cfg.AgentEventsMaxAge,
		"how long an agent's broadcasts and state changes are kept")
	fs.DurationVar(&cfg.IdleTimeout, "idle-timeout", cfg.IdleTimeout,
		"how long an agent stays active without work")
	fs.StringVar(&cfg.AgentVersion, "agent-version", cfg.AgentVersion,
		"the `version` of the agent types' code that turns and fibers started here record (empty: the binary's build)")
	fs.StringVar(&cfg.VersionPolicy, "version-policy", cfg.VersionPolicy,
		"what this node does with a turn or fiber another agent version started: continue, restart (the turn answers again from its last message) or fail (empty: continue)")
	fs.DurationVar(&cfg.ScheduleTimeout, "schedule-timeout", cfg.ScheduleTimeout,
		"how long a schedule callback may run before it is treated as hung: its context is cancelled and the attempt retried with backoff (0: 30s)")
	fs.Int64Var(&cfg.CompactEvents, "compact-events", cfg.CompactEvents,
		"events stored since an agent's last snapshot that make its owner compact it (0: 10000, negative: never compact)")
	fs.Int64Var(&cfg.CompactBytes, "compact-bytes", cfg.CompactBytes,
		"bytes of event data since an agent's last snapshot that make its owner compact it (0: 8 MiB)")
	fs.Int64Var(&cfg.CompactIdleEvents, "compact-idle-events", cfg.CompactIdleEvents,
		"events since an agent's last snapshot that make it compacted when it goes idle (0: 256)")
	fs.DurationVar(&cfg.CompactEvery, "compact-every", cfg.CompactEvery,
		"how often the owner sweeps its agents for those to compact (0: 30s)")
	fs.IntVar(&cfg.MaxStreamConsumers, "max-stream-consumers", cfg.MaxStreamConsumers,
		"consumers each of the log's streams may hold; every client following a chat stream holds one (0: the server's default, 1000)")
	fs.IntVar(&cfg.MaxTurns, "max-turns", cfg.MaxTurns,
		"chat turns running at once on this node; past it new turns get 429 with Retry-After at once (negative: no limit)")
	fs.IntVar(&cfg.BlobThreshold, "blob-threshold", cfg.BlobThreshold,
		"`bytes` above which a chat payload (message part, tool input or output) is stored once in the FOREVER_BLOBS object store and the event holds its reference (0: 262144, negative: never)")
	fs.DurationVar(&cfg.BlobGrace, "blob-grace", cfg.BlobGrace,
		"how long an object of the FOREVER_BLOBS object store that no stored event names any more (its agents deleted) is kept after it was last stored, before the sweeper deletes it (0: 1h, negative: never delete)")
	fs.IntVar(&cfg.ContextTokens, "context-tokens", cfg.ContextTokens,
		"chat context budget in `tokens` (4 bytes each): past it the model gets the system prompt, a summary of the older messages and the newest that fit; the conversation stays whole (0: the provider's default, 100000 for openai and chatcompletions, 150000 for anthropic, none for local; negative: none)")
	fs.StringVar(&cfg.Provider, "provider", cfg.Provider,
		"chat model `provider`: local, openai, chatcompletions or anthropic (keys from OPENAI_API_KEY, ANTHROPIC_API_KEY, or the files named by OPENAI_API_KEY_FILE, ANTHROPIC_API_KEY_FILE)")
	fs.StringVar(&cfg.Model, "model", cfg.Model, "provider's model `name`")
	fs.StringVar(&cfg.ProviderURL, "provider-url", cfg.ProviderURL,
		"provider base `url` (for chatcompletions: the Ollama, llama.cpp or vLLM server)")
	fs.Float64Var(&cfg.LocalRate, "local-rate", cfg.LocalRate,
		"local model speed in tokens/s (0: 30, negative: unlimited)")
	rateFlag := func(r *modellimit.Rate, name, usage string) {
		fs.Func(name, usage, func(v string) error { return r.UnmarshalText([]byte(v)) })
	}
	rateFlag(&cfg.ModelLimit, "model-limit",
		"chat model calls allowed across the cluster, a `rate` such as 10/s or 500/m, shared between tenants by --model-weight (0: no bound)")
	rateFlag(&cfg.ModelTokenLimit, "model-token-limit",
		"chat model tokens allowed across the cluster, a `rate` such as 90000/m, shared between tenants by --model-weight (0: no bound)")
	rateFlag(&cfg.LocalModelLimit, "local-model-limit",
		"the `rate` of calls past which the local model answers 429 with Retry-After, as a provider over its limit does, such as 5/s (0: none)")
	fs.StringVar(&cfg.Prices, "prices", cfg.Prices,
		"JSON `file` of model prices over the built-in ones: {\"<provider>\": {\"<model>\": {\"input\": \"2.50\", \"output\": \"10.00\", \"cached\": \"1.25\"}}}, dollars per million tokens")
	fs.DurationVar(&cfg.ShutdownTimeout, "shutdown-timeout", cfg.ShutdownTimeout,
		"time allowed to each graceful shutdown step (HTTP requests, NATS drain)")
	fs.TextVar(&cfg.LogLevel, "log-level", cfg.LogLevel,
		"minimum log `level`: debug, info, warn or error")
	fs.StringVar(&cfg.LogFormat, "log-format", cfg.LogFormat,
		"log `format`: text or json")
	fs.Var(&repeatedFlag{list: &cfg.MCP}, "mcp",
		"MCP server whose tools every chat agent gets, as `name=command args...` (a stdio server run as a subprocess; split on whitespace) "+
			"or name=https://host/path (streamable HTTP); tools are named <name>__<tool>; repeatable (in the variable: one server per line)")
	fs.Var(&repeatedFlag{list: &cfg.CORSOrigins}, "cors-origin",
		"browser `origin` besides agentd's own allowed to call the HTTP gateway and open its WebSocket: https://app.example.com, *.example.com, localhost:* or * for any; "+
			"others get 403; repeatable (in the variable: one per line)")
	fs.Var(&repeatedFlag{list: &cfg.AllowedHosts}, "allowed-host",
		"`host` the HTTP server answers besides loopback names and addresses: app.example.com, *.example.com, 10.0.0.5, each with an optional :port (:* any); "+
			"without --auth every other Host gets 403 (DNS rebinding); with --auth the check applies only when given; repeatable (in the variable: one per line)")
	fs.StringVar(&cfg.TLSCert, "tls-cert", cfg.TLSCert,
		"PEM certificate `file`: TLS for HTTP, the embedded NATS server's clients and its routes; re-read on SIGHUP")
	fs.StringVar(&cfg.TLSKey, "tls-key", cfg.TLSKey, "PEM private key `file` of --tls-cert; re-read on SIGHUP")
	fs.StringVar(&cfg.TLSCA, "tls-ca", cfg.TLSCA,
		"PEM CA `file`: verifies the cluster routes' peers (mutual TLS, required clustered with --tls-cert) and the --nats-url server")
	fs.StringVar(&cfg.NATSCreds, "nats-creds", cfg.NATSCreds,
		"NATS creds `file` for --nats-url (a user of the account agentd runs in)")
	fs.BoolVar(&cfg.Auth, "auth", cfg.Auth,
		"turn tenants and authentication on: NATS clients need a tenant's creds, HTTP a bearer token; the admin credential is written to <data>/admin.creds "+
			"(required when --http, --nats-listen or --cluster-listen is not a loopback address, unless --insecure)")
	fs.StringVar(&cfg.AuthSecretFile, "auth-secret-file", cfg.AuthSecretFile,
		"`file` holding a secret (at least 32 bytes) the cluster's nodes share; auth's keys are derived from it (required for --auth clustered)")
	fs.BoolVar(&cfg.Insecure, "insecure", cfg.Insecure,
		"allow listening on a non-loopback address without --auth")
	fs.StringVar(&cfg.OIDCIssuer, "oidc-issuer", cfg.OIDCIssuer,
		"also accept HTTP bearer JWTs from this OIDC issuer `url`, verified against its JWKS (needs --auth and --oidc-audience)")
	fs.StringVar(&cfg.OIDCAudience, "oidc-audience", cfg.OIDCAudience,
		"audience (`client id`) the OIDC tokens must carry")
	fs.StringVar(&cfg.OIDCTenantClaim, "oidc-tenant-claim", cfg.OIDCTenantClaim,
		"OIDC token `claim` that names the tenant (default \"tenant\")")
	httpFlags(fs, cfg)
	frameFlags(fs, cfg)
	metricsFlags(fs, cfg)
	encryptionFlags(fs, cfg)
	tenantDefaultFlags(fs, cfg)
	userBudgetFlags(fs, cfg)
	oidcRoleFlag(fs, cfg)
	auditFlags(fs, cfg)
	fs.BoolVar(&cfg.TraceContent, "trace-content", cfg.TraceContent,
		"record message contents (prompts, answers, tool arguments and results) in trace spans; off by default: they hold user data and spans go to a tracing backend "+
			"(tracing itself is on when OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_TRACES_EXPORTER is set)")
	fs.BoolVar(&cfg.TrustTraceparent, "trust-traceparent", cfg.TrustTraceparent,
		"make a client's W3C traceparent (HTTP or NATS header) the parent of agentd's span for its request; off by default: the span starts a trace of its own "+
			"and links to the client's, so clients cannot choose the trace their requests are recorded in or force sampling; turn on when the clients are your own services")
	fs.VisitAll(func(f *flag.Flag) { f.Usage += "; env " + envName(f.Name) })
	return fs
}

// byteSize is a flag.Value for a size in bytes with an optional binary
// suffix: 1024, 64K, 256MiB, 10G, 1TB. All suffixes are powers of 1024.
type byteSize int64

var sizeUnits = []struct {
	suffix string
	shift  uint
}{{"T", 40}, {"G", 30}, {"M", 20}, {"K", 10}}

func (b *byteSize) String() string {
	if b == nil {
		return "0"
	}
	v := int64(*b)
	for _, u := range sizeUnits {
		if v != 0 && v%(1<<u.shift) == 0 {
			return strconv.FormatInt(v>>u.shift, 10) + u.suffix + "iB"
		}
	}
	return strconv.FormatInt(v, 10)
}

func (b *byteSize) Set(s string) error {
	n, err := parseSize(s)
	if err != nil {
		return err
	}
	*b = byteSize(n)
	return nil
}

// ParseSize parses a byte count with an optional binary suffix, as the
// size flags take it: 1048576, 64K, 256MiB, 10G.
func ParseSize(s string) (int64, error) { return parseSize(s) }

// parseSize parses a byte count with an optional suffix (see byteSize).
func parseSize(s string) (int64, error) {
	t := strings.ToUpper(strings.TrimSpace(s))
	t = strings.TrimSuffix(t, "B")
	t = strings.TrimSuffix(t, "I")
	var shift uint
	for _, u := range sizeUnits {
		if strings.HasSuffix(t, u.suffix) {
			shift, t = u.shift, strings.TrimSuffix(t, u.suffix)
			break
		}
	}
	n, err := strconv.ParseInt(strings.TrimSpace(t), 10, 64)
	if err != nil || n < 0 || n > (1<<62)>>shift {
		return 0, fmt.Errorf("size %q is not a byte count like 1048576, 256MiB or 10G", s)
	}
	return n << shift, nil
}

// levelString is the flag spelling of a slog level.
func levelString(l slog.Level) string { return strings.ToLower(l.String()) }

// notFlag is a boolean flag.Value that sets its variable to the
// negation of what it is given: --owned-views (true by default) sets
// Config.AllViews.
type notFlag struct{ b *bool }

func (f notFlag) String() string {
	if f.b == nil {
		return "" // the zero Value flag.PrintDefaults compares with
	}
	return strconv.FormatBool(!*f.b)
}

func (f notFlag) Set(v string) error {
	on, err := strconv.ParseBool(v)
	if err != nil {
		return err
	}
	*f.b = !on
	return nil
}

func (f notFlag) IsBoolFlag() bool { return true }

// listFlag is a flag.Value for a comma-separated list.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }

func (l *listFlag) Set(v string) error {
	*l = nil
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			*l = append(*l, s)
		}
	}
	return nil
}

// repeatedFlag is a flag.Value for a flag given once per item, such as
// --mcp. Its variable holds one item per line. Items from the variable are
// replaced by the first item given on the command line, so that a flag
// beats its variable.
type repeatedFlag struct {
	list    *[]string
	fromEnv bool // the list so far came from the variable
}

func (r *repeatedFlag) String() string {
	if r == nil || r.list == nil {
		return ""
	}
	return strings.Join(*r.list, "\n")
}

func (r *repeatedFlag) Set(v string) error {
	if r.fromEnv {
		*r.list, r.fromEnv = nil, false
	}
	if !strings.Contains(v, "\n") {
		*r.list = append(*r.list, v)
		return nil
	}
	for line := range strings.Lines(v) {
		if line = strings.TrimSpace(line); line != "" {
			*r.list = append(*r.list, line)
		}
	}
	return nil
}
