//go:build !race

package chat_test

const raceEnabled = false
