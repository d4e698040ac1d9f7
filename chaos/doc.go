// Command chaos crashes a real agentd over and over under load and checks
// afterwards, with package verify, that its log kept every invariant.
//
//	go run ./chaos -kills 20 [-bin path/to/agentd] [-seed N]
//
// It builds agentd (unless -bin names one), starts it on a temporary data
// dir with the embedded NATS server, and drives mixed load over NATS: chat
// turns on a few chat agents (the local model, alternating a plain message
// and a /tool clock {} call; each command carries its own message id and
// is sent again with it when its reply is lost or it is refused as busy,
// so verify checks that a command runs once), each followed to its end
// with replay.Client across the crashes (resuming from the last cursor) and
// then replayed from a random cursor, and steps fibers started on a few
// steps agents. Meanwhile
// it SIGKILLs agentd at random intervals and restarts it, and sometimes
// freezes it with SIGSTOP for a few seconds before SIGCONT instead.
//
// At the end it stops the load, runs verify.Check over NATS with every chat
// request id and steps fiber id that was acknowledged (each must be in the
// log), stops agentd with SIGTERM and runs "agentd verify --data" on the
// data dir. It prints a table: kills, stops, operations, violations and the
// restart-to-ready latency (process start to /readyz answering 200), and
// exits 1 when anything was violated: a verify violation (among them a
// stored user message without a turn, and a turn that recorded its outcome
// over a stream that never ended), a reader that saw chunks out of order,
// an acknowledged chat whose stream did not reach its terminal chunk within
// 90 s, or a replay that differs from the stream.
//
// -seed fixes the schedule of kills and the load's choices (not the
// timings of agentd itself). The data dir and agentd's log are kept when
// the run fails, or with -keep.
package main
