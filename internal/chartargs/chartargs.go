package chartargs

import (
	"strconv"
	"strings"
	"time"
)

// Defaults of the chart's values.yaml that shape the cluster. The chart test
// checks that values.yaml has these.
const (
	// DefaultPartitions is agentd.partitions.
	DefaultPartitions = 64
	// DefaultShards is agentd.shards: agentd's own default for a new
	// clustered cluster (agentd.DefaultShards), which Args leaves to
	// agentd, as the chart does, so a release created unsharded keeps its
	// stored layout through a helm upgrade.
	DefaultShards = 8
	// DefaultLeaseTTL is agentd.leaseTtl.
	DefaultLeaseTTL = 10 * time.Second
	// MaxReplicas caps the JetStream replicas of an embedded cluster:
	// R3 survives one lost node, and more replicas only slow every write.
	MaxReplicas = 3
)

// Pod is the start-up configuration of one agentd pod. A zero field leaves
// its flag out, so agentd applies its own default.
type Pod struct {
	// Name is --server-name: the embedded NATS server's name and the node's
	// name in partition leases and the status reply. The chart passes the
	// pod name ($(POD_NAME)).
	Name string
	// Data is --data, the data dir (the chart mounts the pod's volume at
	// /data).
	Data string
	// HTTP is --http, the HTTP server's host:port.
	HTTP string
	// MetricsListen is --metrics-listen, the host:port /metrics is served
	// on: not the API's port, since the node's metrics name every tenant.
	MetricsListen string
	// NATSListen is --nats-listen, the embedded server's client host:port.
	// Empty with an external NATS.
	NATSListen string
	// NATSURL is an external NATS's URL. It is passed as FOREVER_NATS_URL
	// by Env, not as a flag, so a URL that carries credentials shows neither
	// in the process list nor in the pod spec's args (the chart may read it
	// from a Secret).
	NATSURL string
	// Cluster is --cluster-name. Empty runs the embedded server unclustered,
	// and Args then leaves out ClusterListen and Routes as well.
	Cluster string
	// ClusterListen is --cluster-listen, the host:port NATS routes listen on.
	ClusterListen string
	// Routes is --routes: the route URLs of every node of the cluster, this
	// one's included (nats-server ignores a route to itself).
	Routes []string
	// Replicas is --replicas, the JetStream replicas of Forever's streams and
	// KV buckets.
	Replicas int
	// Partitions is --partitions, the number of agent partitions.
	Partitions int
	// Shards is --shards, the stream shards of events and chunks (the
	// chart's agentd.shards). 0 and DefaultShards, the chart's default,
	// pass no flag: agentd creates a new cluster with DefaultShards and
	// keeps the layout an existing one stored.
	Shards int
	// LeaseTTL is --lease-ttl, a partition lease's time to live.
	LeaseTTL time.Duration
	// AuthSecretFile is FOREVER_AUTH_SECRET_FILE, with FOREVER_AUTH=true:
	// the chart's default (auth.enabled) mounts its Secret at
	// AuthSecretPath. Empty runs without auth (FOREVER_INSECURE=true), as
	// the chart does with auth.enabled false or an external NATS.
	AuthSecretFile string
}

// AuthSecretPath is where the chart mounts the auth secret.
const AuthSecretPath = "/etc/forever/auth/secret"

// Flags returns the names of every flag Args can produce, in Args' order.
// The caller owns the returned slice.
func Flags() []string {
	return []string{
		"server-name", "data", "http", "metrics-listen", "nats-listen",
		"cluster-name", "cluster-listen", "routes",
		"replicas", "partitions", "shards", "lease-ttl",
	}
}

// Args returns p as agentd flags in the chart's order, each one
// "--name=value". The caller owns the returned slice.
func Args(p Pod) []string {
	var args []string
	add := func(name, value string) {
		if value != "" {
			args = append(args, "--"+name+"="+value)
		}
	}
	add("server-name", p.Name)
	add("data", p.Data)
	add("http", p.HTTP)
	add("metrics-listen", p.MetricsListen)
	add("nats-listen", p.NATSListen)
	if p.Cluster != "" {
		add("cluster-name", p.Cluster)
		add("cluster-listen", p.ClusterListen)
		add("routes", strings.Join(p.Routes, ","))
	}
	if p.Replicas > 0 {
		add("replicas", strconv.Itoa(p.Replicas))
	}
	if p.Partitions > 0 {
		add("partitions", strconv.Itoa(p.Partitions))
	}
	if p.Shards > 0 && p.Shards != DefaultShards {
		add("shards", strconv.Itoa(p.Shards))
	}
	if p.LeaseTTL > 0 {
		add("lease-ttl", p.LeaseTTL.String())
	}
	return args
}

// Env returns the FOREVER_* variables the chart sets with its default
// values, as "NAME=value" for exec.Cmd.Env: the embedded server's settings,
// or FOREVER_NATS_URL (and NATS_URL, the commands') when p.NATSURL is set, then the settings common to
// both. It leaves out POD_NAME, which the chart sets only to build
// --server-name. The caller owns the returned slice.
func Env(p Pod) []string {
	var env []string
	if p.NATSURL != "" {
		// NATS_URL: the agentd commands run in the pod target it too.
		env = append(env, "FOREVER_NATS_URL="+p.NATSURL, "NATS_URL="+p.NATSURL)
	} else {
		env = append(env,
			"FOREVER_SYNC=always",
			"FOREVER_JS_MAX_MEMORY=256MiB",
			"FOREVER_JS_MAX_STORE=10GiB",
		)
	}
	env = append(env,
		"FOREVER_CHUNK_MAX_AGE=24h",
		"FOREVER_IDLE_TIMEOUT=2m",
		"FOREVER_SHUTDOWN_TIMEOUT=10s",
		"FOREVER_LOG_LEVEL=info",
		"FOREVER_LOG_FORMAT=json",
	)
	if p.AuthSecretFile != "" && p.NATSURL == "" {
		return append(env, "FOREVER_AUTH=true", "FOREVER_AUTH_SECRET_FILE="+p.AuthSecretFile)
	}
	// auth.enabled false or an external NATS: no auth, explicitly.
	return append(env, "FOREVER_INSECURE=true")
}

// Replicas returns the JetStream replicas the chart gives a cluster of n
// embedded nodes: n, at most MaxReplicas, at least 1.
func Replicas(n int) int {
	return max(1, min(n, MaxReplicas))
}
