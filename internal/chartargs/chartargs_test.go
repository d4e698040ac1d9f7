package chartargs_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/forever-agents/forever/internal/chartargs"
)

func TestArgsClustered(t *testing.T) {
	got := chartargs.Args(chartargs.Pod{
		Name:          "n0",
		Data:          "/d",
		HTTP:          "127.0.0.1:1",
		MetricsListen: "127.0.0.1:4",
		NATSListen:    "127.0.0.1:2",
		Cluster:       "c",
		ClusterListen: "127.0.0.1:3",
		Routes:        []string{"nats://a:3", "nats://b:3"},
		Replicas:      3,
		Partitions:    64,
		Shards:        4,
		LeaseTTL:      1500 * time.Millisecond,
	})
	want := []string{
		"--server-name=n0", "--data=/d", "--http=127.0.0.1:1", "--metrics-listen=127.0.0.1:4", "--nats-listen=127.0.0.1:2",
		"--cluster-name=c", "--cluster-listen=127.0.0.1:3", "--routes=nats://a:3,nats://b:3",
		"--replicas=3", "--partitions=64", "--shards=4", "--lease-ttl=1.5s",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("Args:\n got %q\nwant %q", got, want)
	}
}

// TestArgsUnclustered: without a cluster name the route flags are left out
// even when set, and zero fields leave their flags to agentd's defaults.
func TestArgsUnclustered(t *testing.T) {
	got := chartargs.Args(chartargs.Pod{
		Name:          "n0",
		NATSURL:       "nats://user:secret@nats:4222",
		ClusterListen: "127.0.0.1:3",
		Routes:        []string{"nats://a:3"},
	})
	if want := []string{"--server-name=n0"}; !slices.Equal(got, want) {
		t.Fatalf("Args = %q, want %q", got, want)
	}
}

// TestArgsDefaultShards: the chart's default shards, like 0, pass no
// flag, as the chart does: agentd creates a new cluster with its own
// default (the same count) and keeps the layout an existing one stored,
// which a --shards flag would refuse; 1 and other counts are passed.
func TestArgsDefaultShards(t *testing.T) {
	for shards, want := range map[int][]string{
		0:                       nil,
		chartargs.DefaultShards: nil,
		1:                       {"--shards=1"},
		16:                      {"--shards=16"},
	} {
		if got := chartargs.Args(chartargs.Pod{Shards: shards}); !slices.Equal(got, want) {
			t.Errorf("Args with %d shards = %q, want %q", shards, got, want)
		}
	}
}

// TestFlags: every flag Args produces is in Flags, in Flags' order.
func TestFlags(t *testing.T) {
	args := chartargs.Args(chartargs.Pod{
		Name: "n", Data: "d", HTTP: "h", MetricsListen: "m", NATSListen: "l", Cluster: "c", ClusterListen: "cl",
		Routes: []string{"r"}, Replicas: 1, Partitions: 1, Shards: 1, LeaseTTL: time.Second,
	})
	var names []string
	for _, a := range args {
		name, _, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		names = append(names, name)
	}
	if want := chartargs.Flags(); !slices.Equal(names, want) {
		t.Fatalf("flags of Args = %q, Flags = %q", names, want)
	}
}

// TestEnvNATSURL: an external NATS's URL goes into the environment, never on
// the command line, and the embedded server's settings are left out.
func TestEnvNATSURL(t *testing.T) {
	const url = "nats://user:secret@nats:4222"
	env := chartargs.Env(chartargs.Pod{Name: "n0", NATSURL: url})
	if !slices.Contains(env, "FOREVER_NATS_URL="+url) {
		t.Fatalf("Env = %q, want FOREVER_NATS_URL", env)
	}
	for _, kv := range env {
		if strings.HasPrefix(kv, "FOREVER_SYNC=") || strings.HasPrefix(kv, "FOREVER_JS_") {
			t.Errorf("Env with an external NATS has %q", kv)
		}
	}
	for _, a := range chartargs.Args(chartargs.Pod{Name: "n0", NATSURL: url}) {
		if strings.Contains(a, "secret") {
			t.Errorf("Args has the URL: %q", a)
		}
	}
}

func TestReplicas(t *testing.T) {
	for n, want := range map[int]int{0: 1, 1: 1, 2: 2, 3: 3, 5: 3} {
		if got := chartargs.Replicas(n); got != want {
			t.Errorf("Replicas(%d) = %d, want %d", n, got, want)
		}
	}
}
