package audit

import (
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"
)

// TestRefusalKeysBounded: refusals from ever new sources never hold more
// than MaxRefusalKeys limits (past it, the idle ones are forgotten, or
// new sources share the overflow's).
func TestRefusalKeysBounded(t *testing.T) {
	l := &Log{
		queue:    make(chan Record, 1),
		node:     rate.NewLimiter(NodeRefusalRate, NodeRefusalBurst),
		refusals: map[refusalKey]*refusalBucket{},
		overflow: refusalBucket{lim: rate.NewLimiter(RefusalRate, RefusalBurst)},
		dropped:  prometheus.NewCounter(prometheus.CounterOpts{Name: "d"}),
		supp:     prometheus.NewCounter(prometheus.CounterOpts{Name: "s"}),
	}
	for i := range 3 * MaxRefusalKeys {
		l.Refused(Record{Tenant: "acme", Action: "auth.refused", From: fmt.Sprintf("10.%d.%d.%d:80", i>>16, (i>>8)&255, i&255)})
	}
	if got := len(l.refusals); got > MaxRefusalKeys {
		t.Fatalf("%d refusal limits held, more than %d", got, MaxRefusalKeys)
	}
}
