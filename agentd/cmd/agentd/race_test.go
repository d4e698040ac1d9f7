//go:build race

package main

// raceEnabled is true when the tests run with -race; the binary test then
// builds agentd with -race too, reusing the packages the test build compiled.
const raceEnabled = true
