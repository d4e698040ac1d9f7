// Package demo has the agent type and the tools agentd offers out of the
// box, for the quick start, the tests, chaos and the benchmarks:
//
//   - the steps agent (ids "steps:<name>"): its start verb runs a fiber of
//     N idempotent steps, each followed by a stash, chained so that a step
//     costs one synced write (fiber.ThenStep); each step's effect appends a
//     steps.executed event, or nothing with "effect": "none";
//   - the chat tools clock (idempotent) and note (unsafe: it appends a line
//     to <data>/notes.txt, and needs approval when its text contains
//     "approve").
//
// # Invariants
//
//   - A completed step never runs again: after a crash the fiber resumes
//     from its last snapshot, and a step cut off mid-run reruns under the
//     same op id (its effect is idempotent by that id).
//   - A note cut off by a crash is not written again: the model is told
//     its outcome is unknown.
package demo
