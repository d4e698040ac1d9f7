//go:build race

package chat_test

// raceEnabled is true when the tests run with -race: a test that measures
// keeps only what checks (-race's figures mean nothing).
const raceEnabled = true
