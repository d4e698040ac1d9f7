// Package promreg registers Prometheus collectors that several instances of
// a component share: every Log, Runner, Pool, Scheduler, chat Agent or
// gateway of a process registers the same metrics on one registry, and the
// second one must get the first one's collectors instead of an error.
package promreg

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Register registers c on reg and returns it, or returns the collector of
// the same type already registered under the same description. A nil reg
// registers nothing and returns c. Any other registration error (a name
// registered with other labels or help) is returned.
func Register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	if reg == nil {
		return c, nil
	}
	err := reg.Register(c)
	if err == nil {
		return c, nil
	}
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing, nil
		}
	}
	return c, fmt.Errorf("register metric: %w", err)
}
