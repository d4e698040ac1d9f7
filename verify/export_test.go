package verify

import (
	"time"

	"github.com/forever-agents/forever/eventlog"
)

// WithHooks sets Check's test hooks: afterLast runs once a read of a
// stream knows its last sequence, betweenReads before Check reads the log
// again.
func WithHooks(o Options, afterLast func(eventlog.Filter), betweenReads func()) Options {
	o.afterLast, o.betweenReads = afterLast, betweenReads
	return o
}

// WithPause sets the first pause between Check's reads.
func WithPause(o Options, d time.Duration) Options {
	o.pause = d
	return o
}
