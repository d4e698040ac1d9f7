// Package chatreplay replays an agent's recorded chat turns through the
// current code, as Temporal's workflow replayer replays workflow histories:
// a regression test for agent types, and the engine of "agentd replay".
// (Package replay is another thing: clients following chat streams.)
//
// # Model
//
// A Recording is an agent's stored events and chunks (Read from a log, or
// Load from a file written by Write, one stored event per line). Run takes
// its turns in order. For each, it sends the recorded user message, with
// the same request id, body and client tools (or, for a turn that answered
// tool calls, the recorded answers: approvals, client results), to a fresh
// chat.Agent of the same id, configured by Options.Configure (the agent
// type's code under test), on a throwaway log: an embedded nats-server and
// Pebble in a temporary directory, real parts, removed afterwards. There:
//
//   - the model is the recording: call k of the turn streams what the
//     recorded model streamed in step k (its text, reasoning and tool
//     calls, read back from the turn's stream), the step's finish (or the
//     recorded error), and the turn's usage on its last step;
//   - each server tool keeps its name, schema, safety and approval rule,
//     but a call is answered with its recorded result (the stream's
//     tool-output-available or tool-output-error, in whichever of the
//     agent's streams it was written), never run: nothing reaches a
//     model, runs a tool, or is written to the recorded log.
//
// The turns before a turn run the same way, so its conversation is built
// by the code under test from the recorded outputs.
//
// # What is compared, first difference first
//
//  1. The tool runner: a call the recording did not run, or with another
//     tool name or input (JSON values compared), is a difference.
//  2. The model's input: a recorded step calling a tool the new code
//     does not offer (a renamed or removed tool).
//  3. The tool calls of the stream in order: each call's id, tool and
//     input, and its outcome (output, error, approval request, denial).
//  4. The model calls: a call beyond the recorded steps (the new code
//     called the model more often).
//  5. The turn's events, without the fibers' and steps' bookkeeping
//     (fiber.*, op.*, whose stashes depend on timing): each event's type,
//     a message's role and parts, a turn's finish reason, the usage.
//
// Each turn's Result is the first difference, or none (Same). The model's
// input is not compared: the log does not hold it, so a new system prompt
// alone is no difference; what the new code does with the recorded output
// is.
//
// # Limits
//
// A turn the model failed fails again: the recorded error ends the step it
// ended. Turns that continue an earlier answer (ContinueLastTurn), turns
// interrupted from outside (cancel, stop, a double-texting policy) and
// turns that have not ended are reported as skipped. Sub-agent calls are answered from the
// recording like any tool (no child runs). Payloads stored by reference
// (blobs) and a fork's history shared from its parent are not read: replay
// an agent whose events hold them inline.
package chatreplay
