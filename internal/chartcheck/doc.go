// Package chartcheck tests the helm/forever chart beyond the agentd flags
// its pods start with (internal/chartargs checks those): that it refuses
// bad values, that it never renders a secret that changes on every render,
// that its default pods pass the Pod Security Standards' restricted
// profile, and that its alerts and dashboard use only metrics agentd
// exports.
//
// The package has no code outside its tests. The tests run the helm binary
// (skipped when it is not on PATH, except under CI, where .ci/run builds
// it), and TestObservabilityMetrics builds and runs agentd.
//
// # Invariants
//
//   - Values outside what agentd accepts fail helm template and helm lint
//     --strict with a message naming the value: replicaCount 2 or another
//     even count, an unknown agentd.sync or log format, a size agentd's
//     ParseSize refuses, a duration Go refuses (TestSchema).
//   - Without a cluster to look the auth Secret up in (helm template, Argo
//     CD), the chart renders no random secret unless auth.generateSecret
//     acknowledges it; with auth.existingSecret it renders none (TestAuthSecret).
//   - The default pods pass the restricted profile: seccomp RuntimeDefault,
//     no privilege escalation, all capabilities dropped, non-root, no
//     service account token, resources, zone spread (TestRestricted); the
//     NetworkPolicy lets only the release's pods reach the route port
//     (TestNetworkPolicy).
//   - Every metric the PrometheusRule and the Grafana dashboard query is on
//     a running agentd's /metrics, or listed in pending with its meaning
//     until agentd exports it (TestObservabilityMetrics).
package chartcheck
