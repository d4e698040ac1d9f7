//go:build !race

package agentd

// raceEnabled is true when the tests run with -race.
const raceEnabled = false
