// Command bench is Forever's benchmark harness: it runs end-to-end scenarios
// against a real embedded nats-server with JetStream and a real Pebble, and
// prints one table in which every figure stands next to a baseline measured
// in the same run.
//
// # Model
//
// A Scenario is a name and a function that measures something on an Env and
// returns Rows. An Env is one JetStream sync mode: a fresh embedded server
// storing under a temp dir (with SyncAlways for "always", the server's default
// interval for "interval"), one client connection, and scratch dirs for Pebble.
// With -sync both, every selected scenario runs once per mode, each mode on
// its own server.
//
// Each Row is a figure (a rate or a latency), its value, the baseline it is
// compared with and the baseline's value, and optionally a target ratio.
//
// Some scenarios measure the real agentd process instead of the packages
// in-process: restart-ready, restart-load, restart-share, sync-cost, failover, auth-cost and chat-post build
// ./agentd/cmd/agentd once per run (go build, so run the bench from inside
// the module) and start it on data dirs of their own, driving it over NATS
// and HTTP as a client would; failover starts a 3-node loopback cluster
// with the chart's flags (internal/chartargs) and SIGKILLs owners, with
// 30 steps agents writing throughout, and reports per kill the fraction of
// them that stalled more than 1 s, the victim's (owned by the killed node
// or in a shard it led) and the others' (issue 36: the others never, the
// victim's resumed within the election plus the lease TTL); restart-share
// starts a 3- and then a 6-node cluster with --shards 8 --owned-views (or
// -agentd-flags), each node held to -cpu-quota as scale-out's, fills each
// with the same history, waits out JetStream's duplicate window (at -n 1
// and above, as restart-ready and scale do), and compares one
// node's restart and rebuild from an empty Pebble (time, CPU, events
// applied) at 6 nodes with 3 (goal within 0.5x); handoff starts a 3-node
// cluster with the same 30 steps agents, stops each node in turn with
// SIGTERM and starts it again, and reports each agent's gap across a
// move of its partition between live nodes, a stop's and a start's (goal:
// none over 1 s), against the steady gap between two events of one node;
// follow-stepdown (-nodes 3; with fewer it says why and skips) steps the
// log's events stream down, round after round, and starts two follows of
// its stored events a few milliseconds later, the log's Follow and a bare
// ordered consumer iterated with Messages at nats.go's default heartbeat,
// and reports the time to each one's first event (2-9% of the pulls
// made in an election is answered "no responders", and a Messages
// iterator then waits for two missed heartbeats);
// auth-cost runs one agentd with --auth (its client a tenant's credential)
// beside one without, in alternating rounds; restart-load SIGKILLs and
// restarts an agentd under sustained chat load (30 agents chatting on the
// local model) and an idle one, in alternating rounds, and compares their
// restart to ready; conversation-growth posts 1,000 turns of one agent to
// POST /v1/chat, each body the whole history as the AI SDK's useChat sends
// it, and compares the events stream's bytes per turn late and early and
// the conversation's stored bytes with its content (-n 0.1: 100 turns).
// chat-post times POST /v1/chat to data: [DONE] beside the two JetStream
// reads of the gateway's follow check (built from main, its POST figure is
// the one before the check). scale-out (issue 36's scale model) starts
// a 3-node and then a 6-node cluster with the chart's flags, each node's
// process in a cgroup v1 cpu cgroup of its own with the same quota
// (-cpu-quota, 0.25 CPU), drives 400 agents' chats in a closed loop and
// prints the turns/s ratio (goal 1.8x) and each node's events applied/s
// and CPU next to its cluster's mean (within 1.5x), each cluster's
// idle CPU before the load, and per turn its consumers created, posts
// answered 409 and live follows' idle reads of the log; -agentd-flags
// adds flags to every node;
// -node-profiles DIR runs the nodes with --pprof and writes a CPU profile
// of each over the idle and the measured window, and each node's log;
// each cluster is measured once its shard streams' leaders are spread
// (the first spread done, waited for up to 90 s), and failed turns are counted by kind; without a writable
// cgroup v1 cpu controller it prints one SKIP row. docs/scaling.md has its figures.
// They do not use the Env's
// server. A scenario marked Once (sync-cost, which runs
// agentd under both sync modes itself; failover, which runs it as the chart
// does; auth-cost; conversation-growth, whose figures are bytes) runs under
// the first selected mode only, and its rows show sync
// "both".
//
// Issue 27's goals each have a row with its target, printed PASS or MISS:
//
//	go run ./bench -sync always -run '^(tool-call|tool-turn|tool-agents|chat-chunks|fiber-stash|failover|group-commit)$'
//
// tool-call (a tool call within 2x a bare fiber.Step, p50 and p99; and
// the records a tool call stores in each stream beside a bare step's,
// each its own fsync under sync always unless an atomic batch carries it),
// tool-turn (a plain turn within 12 synced publishes, a 10-tool turn
// within 12x a plain turn), tool-agents (100 agents' tool calls/s at least
// 0.4x of one-at-a-time synced publishes/s: 2,000/s at 5,000 fsyncs/s;
// the process's CPU per tool call, with the rate that CPU allows on
// all of the machine's cores, and the heap it allocates per tool call,
// which paces the garbage collector behind a tool call's p99),
// chat-chunks (100 streams at 6x one-by-one synced publishes, 2x the 3x of
// before), fiber-stash (within 1.3x of a raw synced publish), group-commit
// (100 agents' fenced appends at 2x the same writers' raw publishes; a lone
// writer within 1.2x) and failover (p99 within 3 s; -lease-ttl runs it at
// another TTL than the chart's, and it counts the lease bucket's writes per
// node). docs/benchmarks.md has the figures.
//
// The temporal scenario compares the steps agent's step with a Temporal
// regular activity, by the same method, in alternating rounds. It needs
// -temporal with the path of a Temporal CLI binary (built from the Go
// module proxy: go install github.com/temporalio/cli/cmd/temporal@v1.5.1)
// and is skipped without it. Its Temporal side is bench/temporal, a module
// of its own, so that the Temporal SDK is not a dependency of Forever.
//
// # Invariants
//
//   - A figure is only ever compared with a baseline measured in the same run,
//     right next to it: the machines this runs on drift up to 2x within
//     minutes. Scenarios alternate baseline and subject in rounds
//     (B S S B B S ...) so drift hits both alike.
//   - The ratio is oriented so that above 1 means ours is better: ours/baseline
//     for rates, baseline/ours for latencies. A target is a minimum ratio.
//   - Scenarios do not share streams: each opens its own Log (own prefix and
//     stream names) and its own raw streams on the mode's server.
//
// # Usage
//
//	go run ./bench                    # every scenario, both sync modes
//	go run ./bench -sync always -run 'append' -n 2
//	go run ./bench -json > results.json
//	go run ./bench -sync always -run '^tool-agents$' -window-cpuprofile cpu.prof  # the timed windows only: cpu.prof.1, .2, ...
//	go run ./bench -run '^temporal$' -temporal "$(go env GOPATH)/bin/temporal"
//
// To add a scenario, write a file with a func(ctx, *Env) (Result, error) and
// list it in scenarios() in scenario.go.
package main
