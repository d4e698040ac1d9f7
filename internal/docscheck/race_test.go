//go:build race

package docscheck

// raceEnabled is true when the tests run with -race; TestRunnableBlocks then
// builds agentd with -race too, reusing the packages the test build compiled.
const raceEnabled = true
