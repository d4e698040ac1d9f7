package main

import (
	"bytes"
	"context"
	"fmt"

	"github.com/forever-agents/forever/eventlog"
)

// payloadSizes are the event data sizes the append scenarios measure: a
// small lifecycle event and a chunk-sized one.
var payloadSizes = []int{64, 1024}

// payload returns size bytes of valid JSON (a string), for event data.
func payload(size int) []byte {
	b := bytes.Repeat([]byte("x"), max(size, 2))
	b[0], b[len(b)-1] = '"', '"'
	return b
}

// sizeName formats a payload size as 64B or 1KiB.
func sizeName(size int) string {
	if size%1024 == 0 {
		return fmt.Sprintf("%dKiB", size/1024)
	}
	return fmt.Sprintf("%dB", size)
}

// benchEvent is the event the append scenarios store: agent a1's lifecycle
// event with size bytes of data. ID and Time are left for Append to fill in.
func benchEvent(agent string, size int) eventlog.Event {
	return eventlog.Event{Agent: agent, Type: "bench.appended", Data: payload(size)}
}

// perSize runs one scenario body for each payload size and joins its rows.
func perSize(ctx context.Context, env *Env, n int, f func(ctx context.Context, env *Env, n, size int) ([]Row, error)) (Result, error) {
	var res Result
	for _, size := range payloadSizes {
		rows, err := f(ctx, env, n, size)
		if err != nil {
			return res, fmt.Errorf("%s: %w", sizeName(size), err)
		}
		res.Rows = append(res.Rows, rows...)
	}
	return res, nil
}
