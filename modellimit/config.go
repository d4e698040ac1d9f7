package modellimit

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Defaults of Config.
const (
	DefaultBackoff    = time.Second
	DefaultMaxBackoff = time.Minute
)

// Clock tells time; tests may pass their own. chat's Clock is the same
// interface.
type Clock interface {
	Now() time.Time
	After(d time.Duration) <-chan time.Time
}

type systemClock struct{}

func (systemClock) Now() time.Time                         { return time.Now() }
func (systemClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// Config configures a Limiter. Zero fields take the defaults.
type Config struct {
	// Calls bounds the model calls that start per model, cluster-wide
	// (this node takes its Share of it). Zero: no bound on calls.
	Calls Rate
	// Tokens bounds the tokens of the calls per model, cluster-wide: a
	// call takes its estimate when it starts and the difference to the
	// usage it reports when it ends. Zero: no bound on tokens.
	Tokens Rate
	// Burst is how much of each bound may be taken at once after a quiet
	// time, as a length of time at the bound's rate: one second of it by
	// default (10 calls for 10/s, 1500 tokens for 90000/m), at least one
	// unit.
	Burst time.Duration
	// Share returns this node's part of the cluster's bounds, in (0, 1]:
	// 1 / the nodes serving tenants. It is read at every refill, so a
	// node joining or leaving changes every node's rate at once. Nil: 1.
	Share func() float64
	// Backoff is the pause after a provider's rate-limited answer that
	// names no Retry-After, doubled on each such answer in a row up to
	// MaxBackoff. Defaults 1s and 1m.
	Backoff, MaxBackoff time.Duration
	// Clock defaults to the system clock.
	Clock Clock
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Registerer receives the forever_model_limiter_* metrics; nil: not
	// registered.
	Registerer prometheus.Registerer
}

func (c *Config) ensureDefaults() {
	if c.Burst == 0 {
		c.Burst = time.Second
	}
	if c.Backoff == 0 {
		c.Backoff = DefaultBackoff
	}
	if c.MaxBackoff == 0 {
		c.MaxBackoff = DefaultMaxBackoff
	}
	if c.Clock == nil {
		c.Clock = systemClock{}
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Validate reports a config that cannot be used, after defaults.
func (c *Config) Validate() error {
	switch {
	case c.Calls.N < 0 || c.Tokens.N < 0:
		return fmt.Errorf("%w: a negative rate", ErrInvalidConfig)
	case c.Burst < 0 || c.Backoff < 0 || c.MaxBackoff < 0:
		return fmt.Errorf("%w: a negative duration", ErrInvalidConfig)
	case c.MaxBackoff < c.Backoff:
		return fmt.Errorf("%w: MaxBackoff %s is below Backoff %s", ErrInvalidConfig, c.MaxBackoff, c.Backoff)
	}
	return nil
}
