package agentd

import (
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// Lame duck mode of the embedded server at shutdown, after the partitions
// were handed off: JetStream leaderships move first, then clients are
// closed over the duration so they reconnect to the other nodes.
const (
	lameDuckGrace    = 500 * time.Millisecond
	lameDuckDuration = 2 * time.Second
)

// Route liveness of the embedded clustered server.
const (
	routePing        = 2 * time.Second
	routeMaxPingsOut = 3
)

// clustered reports whether the embedded server joins a cluster.
func (c *Config) clustered() bool { return c.NATSURL == "" && c.ClusterListen != "" }

// validateCluster checks the cluster flags.
func (c *Config) validateCluster() error {
	if c.ServerName == "" || strings.ContainsAny(c.ServerName, " .*>\t") {
		return configErrorf("server-name", "server name %q must be non-empty without spaces, dots, * or >", c.ServerName)
	}
	if c.NATSURL != "" {
		for _, f := range []struct{ flag, v string }{
			{"cluster-listen", c.ClusterListen}, {"cluster-name", c.ClusterName}, {"routes", strings.Join(c.Routes, ",")},
		} {
			if f.v != "" {
				return configErrorf(f.flag, "--%s applies to the embedded server; with --nats-url the external server's cluster is used", f.flag)
			}
		}
	}
	if c.ClusterListen == "" {
		if len(c.Routes) > 0 {
			return configErrorf("cluster-listen", "--routes needs --cluster-listen, the address this node accepts routes on")
		}
	} else if _, _, err := splitAddr(c.ClusterListen); err != nil {
		return configErrorf("cluster-listen", "cluster listen address %q: %v", c.ClusterListen, err)
	}
	if _, err := routeURLs(c.Routes); err != nil {
		return configErrorf("routes", "%v", err)
	}
	if c.Replicas < 0 || c.Replicas > 5 {
		return configErrorf("replicas", "replicas %d is not between 1 and 5 (0 picks 3 when clustered, 1 otherwise)", c.Replicas)
	}
	if c.Partitions < 1 || c.Partitions > 4096 {
		return configErrorf("partitions", "partitions %d is not between 1 and 4096", c.Partitions)
	}
	if c.LeaseTTL < time.Second {
		return configErrorf("lease-ttl", "lease TTL %s is below 1s, the server's TTL granularity", c.LeaseTTL)
	}
	return nil
}

// routeURLs parses the --routes list: URLs, or host:port meaning
// nats-route://host:port. A host that resolves to several addresses (a
// headless service) is one route: the server dials one of its addresses and
// learns the others from the cluster's gossip.
func routeURLs(routes []string) ([]*url.URL, error) {
	var out []*url.URL
	for _, r := range routes {
		r = strings.TrimSpace(r)
		if r == "" {
			continue
		}
		if !strings.Contains(r, "://") {
			r = "nats-route://" + r
		}
		u, err := url.Parse(r)
		if err != nil {
			return nil, fmt.Errorf("route %q: %v", r, err)
		}
		if _, _, err := net.SplitHostPort(u.Host); err != nil {
			return nil, fmt.Errorf("route %q needs host:port: %v", r, err)
		}
		out = append(out, u)
	}
	return out, nil
}

// clusterOptions sets the cluster part of the embedded server's options.
func clusterOptions(cfg *Config, opts *server.Options) error {
	opts.ServerName = cfg.ServerName
	opts.LameDuckGracePeriod = lameDuckGrace
	opts.LameDuckDuration = lameDuckDuration
	if !cfg.clustered() {
		return nil
	}
	host, port, err := splitAddr(cfg.ClusterListen)
	if err != nil {
		return configErrorf("cluster-listen", "cluster listen address %q: %v", cfg.ClusterListen, err)
	}
	if port == 0 {
		port = server.RANDOM_PORT
	} else if err := checkListen("cluster listen address", "cluster-listen", cfg.ClusterListen); err != nil {
		return err
	}
	routes, err := routeURLs(cfg.Routes)
	if err != nil {
		return configErrorf("routes", "%v", err)
	}
	// A peer that stops answering (SIGSTOP, a stall) keeps its queue
	// subscriptions in the cluster until its route is found dead; at the
	// default 2 minutes commands sent to it would hang that long. Routes are
	// pinged every routePing and dropped after routeMaxPingsOut misses, well
	// inside a lease TTL.
	opts.Cluster = server.ClusterOpts{Name: cfg.ClusterName, Host: host, Port: port,
		PingInterval: routePing, MaxPingsOut: routeMaxPingsOut}
	opts.Routes = routes
	// A dead peer is retried every second on each of its routes; the
	// server reports the first failure and then one in routeErrorReports
	// (about once a minute), not every attempt.
	opts.ReconnectErrorReports = routeErrorReports
	return nil
}

// routeErrorReports is how many failed attempts to reach a lost route
// peer make one line in the log (the server's ReconnectErrorReports).
const routeErrorReports = 60

// replicasFor returns the replicas of the streams and buckets: cfg.Replicas,
// or 3 when clustered and 1 otherwise.
func replicasFor(cfg *Config, nc *nats.Conn) int {
	if cfg.Replicas > 0 {
		return cfg.Replicas
	}
	if cfg.clustered() || (cfg.NATSURL != "" && nc.ConnectedClusterName() != "") {
		return 3
	}
	return 1
}
