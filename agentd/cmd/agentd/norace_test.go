//go:build !race

package main

// raceEnabled is true when the tests run with -race.
const raceEnabled = false
