package chartargs_test

import (
	"fmt"
	"strings"

	"github.com/forever-agents/forever/internal/chartargs"
)

// Three nodes on loopback, started as the chart starts its pods.
func Example() {
	var routes []string
	for i := range 3 {
		routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", 16222+i))
	}
	for i := range 3 {
		pod := chartargs.Pod{
			Name:          fmt.Sprintf("n%d", i),
			Data:          fmt.Sprintf("/tmp/n%d", i),
			HTTP:          fmt.Sprintf("127.0.0.1:%d", 18080+i),
			NATSListen:    fmt.Sprintf("127.0.0.1:%d", 14222+i),
			Cluster:       "forever",
			ClusterListen: fmt.Sprintf("127.0.0.1:%d", 16222+i),
			Routes:        routes,
			Replicas:      chartargs.Replicas(3),
			Partitions:    chartargs.DefaultPartitions,
			LeaseTTL:      chartargs.DefaultLeaseTTL,
		}
		// exec.Command(agentd, chartargs.Args(pod)...) with
		// cmd.Env = append(os.Environ(), chartargs.Env(pod)...)
		if i == 0 {
			fmt.Println(strings.Join(chartargs.Args(pod), "\n"))
		}
	}
	// Output:
	// --server-name=n0
	// --data=/tmp/n0
	// --http=127.0.0.1:18080
	// --nats-listen=127.0.0.1:14222
	// --cluster-name=forever
	// --cluster-listen=127.0.0.1:16222
	// --routes=nats://127.0.0.1:16222,nats://127.0.0.1:16223,nats://127.0.0.1:16224
	// --replicas=3
	// --partitions=64
	// --lease-ttl=10s
}
