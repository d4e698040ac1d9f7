// Package chartargs is the one description of how an agentd pod of the
// helm/forever chart starts: the flags on its command line (Args) and the
// FOREVER_* variables in its environment (Env).
//
// Three parties depend on it agreeing with each other:
//
//   - the chart's StatefulSet, which renders the same flags in the same order
//     for every pod, with --server-name=$(POD_NAME) from the downward API;
//   - the chart test in this package, which renders the chart with helm
//     template (default, one replica, external NATS) and checks every pod's
//     args and env against Args and Env;
//   - agentd's loopback cluster test, which starts its nodes with Args and Env
//     on loopback addresses, so that what it proves holds for the pods the
//     chart starts.
//
// Change the chart and this package together; the chart test fails when they
// drift. Flags lists every flag name Args can produce, so agentd's own tests
// can check that its flag set defines them.
//
// # Usage
//
//	pod := chartargs.Pod{
//		Name:          "n0",
//		Data:          dir,
//		HTTP:          "127.0.0.1:18080",
//		NATSListen:    "127.0.0.1:14222",
//		Cluster:       "forever",
//		ClusterListen: "127.0.0.1:16222",
//		Routes:        []string{"nats://127.0.0.1:16222", "nats://127.0.0.1:16223", "nats://127.0.0.1:16224"},
//		Replicas:      chartargs.Replicas(3),
//		Partitions:    chartargs.DefaultPartitions,
//		LeaseTTL:      chartargs.DefaultLeaseTTL,
//	}
//	cmd := exec.Command(agentdBinary, chartargs.Args(pod)...)
//	cmd.Env = append(os.Environ(), chartargs.Env(pod)...)
package chartargs
