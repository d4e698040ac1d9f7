package chunk

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/forever-agents/forever/eventlog"
	"github.com/prometheus/client_golang/prometheus"
)

// RetentionLog is the part of the event log chunk retention uses:
// *eventlog.Log implements it.
type RetentionLog interface {
	PurgeChunks(ctx context.Context, agent, stream string) error
	Append(ctx context.Context, e eventlog.Event, opts ...eventlog.AppendOpt) (eventlog.Seq, error)
}

var _ RetentionLog = (*eventlog.Log)(nil)

// Sweeper defaults.
const (
	// DefaultSweepBatch caps the streams one Sweep expires; the rest wait
	// for the next one.
	DefaultSweepBatch = 1000
	minSweepInterval  = 10 * time.Millisecond
	maxSweepInterval  = time.Minute
)

// SweeperConfig configures NewSweeper. A zero field means "use the
// default".
type SweeperConfig struct {
	// Log purges chunks and appends the expiry markers. Required.
	Log RetentionLog
	// Streams reads the streams projection. Required.
	Streams *Streams
	// MaxAge is how long after its end a stream's chunks are kept.
	// Required: pass eventlog.Log.ChunkMaxAge().
	MaxAge time.Duration
	// Owns reports whether this process may expire agent's streams; in a
	// cluster only the agent's owner does. Nil means every agent.
	Owns func(agent string) bool
	// Interval between sweeps in Run. Default MaxAge/4, between 10ms and
	// one minute.
	Interval time.Duration
	// Batch caps the streams one Sweep expires. Default DefaultSweepBatch.
	Batch int
	// Now is the clock deciding what is old enough. Default time.Now.
	Now func() time.Time
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Registerer receives the sweeper's metrics. Nil means not registered.
	Registerer prometheus.Registerer
}

// ErrInvalidConfig is returned by NewSweeper and SweeperConfig.Validate.
var ErrInvalidConfig = errors.New("chunk: invalid config")

// Validate checks the config after defaults are applied.
func (c *SweeperConfig) Validate() error {
	switch {
	case c.Log == nil:
		return fmt.Errorf("%w: Log is required", ErrInvalidConfig)
	case c.Streams == nil:
		return fmt.Errorf("%w: Streams is required", ErrInvalidConfig)
	case c.MaxAge <= 0:
		return fmt.Errorf("%w: MaxAge must be positive", ErrInvalidConfig)
	case c.Interval < 0 || c.Batch < 0:
		return fmt.Errorf("%w: Interval and Batch must not be negative", ErrInvalidConfig)
	}
	return nil
}

func (c *SweeperConfig) ensureDefaults() {
	if c.Owns == nil {
		c.Owns = func(string) bool { return true }
	}
	if c.Interval == 0 {
		c.Interval = min(max(c.MaxAge/4, minSweepInterval), maxSweepInterval)
	}
	if c.Batch == 0 {
		c.Batch = DefaultSweepBatch
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Sweeper is chunk retention: it purges the chunks of chat streams that
// ended (finish, error or abort) more than MaxAge ago, and marks each
// expired with an EventExpired marker on its subject, so the streams view
// says so and a resume is answered ErrExpired. A stream still streaming is
// never purged, however old. It is safe for concurrent use, though one Run
// per process is enough.
type Sweeper struct {
	cfg     SweeperConfig
	logger  *slog.Logger
	expired prometheus.Counter
	errors  prometheus.Counter
}

// NewSweeper returns a sweeper; Run it, or call Sweep.
func NewSweeper(cfg SweeperConfig) (*Sweeper, error) {
	cfg.ensureDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Sweeper{
		cfg:    cfg,
		logger: cfg.Logger.With("subsystem", "chunk-retention"),
		expired: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "forever_chunk_streams_expired_total",
			Help: "Chat streams whose chunks retention purged.",
		}),
		errors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "forever_chunk_retention_errors_total",
			Help: "Chat streams retention failed to purge or mark (retried next sweep).",
		}),
	}
	if cfg.Registerer != nil {
		for _, c := range []prometheus.Collector{s.expired, s.errors} {
			if err := cfg.Registerer.Register(c); err != nil {
				return nil, fmt.Errorf("chunk: register retention metrics: %w", err)
			}
		}
	}
	return s, nil
}

// Run sweeps every Interval until ctx is done, then returns nil. A failed
// sweep is logged and retried at the next one.
func (s *Sweeper) Run(ctx context.Context) error {
	t := time.NewTicker(s.cfg.Interval)
	defer t.Stop()
	for {
		if n, err := s.Sweep(ctx); err != nil && ctx.Err() == nil {
			s.logger.Warn("chunk retention sweep", "expired", n, "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Sweep expires, once, the owned streams that ended more than MaxAge ago,
// at most Batch of them: for each it purges the chunks (PurgeChunks), then
// appends the EventExpired marker. A crash between the two leaves a purged
// stream not yet marked; the next sweep purges it again (nothing) and marks
// it. It returns how many streams it expired and the errors met, joined;
// a stream that failed is left for the next sweep.
func (s *Sweeper) Sweep(ctx context.Context) (int, error) {
	now := s.cfg.Now()
	var due []StreamInfo
	var errs []error
	for info, err := range s.cfg.Streams.Ended(now.Add(-s.cfg.MaxAge)) {
		if err != nil {
			errs = append(errs, err)
			var ce *eventlog.CorruptError
			if errors.As(err, &ce) {
				continue
			}
			break
		}
		if !s.cfg.Owns(info.Agent) {
			continue
		}
		if due = append(due, info); len(due) == s.cfg.Batch {
			break
		}
	}
	n := 0
	for _, info := range due {
		if err := ctx.Err(); err != nil {
			return n, err
		}
		if err := s.expire(ctx, info, now); err != nil {
			s.errors.Inc()
			errs = append(errs, err)
			continue
		}
		n++
		s.expired.Inc()
	}
	return n, errors.Join(errs...)
}

// expire purges one stream and marks it expired.
func (s *Sweeper) expire(ctx context.Context, info StreamInfo, now time.Time) error {
	if err := s.cfg.Log.PurgeChunks(ctx, info.Agent, info.Stream); err != nil {
		return fmt.Errorf("chunk: expire %s/%s: %w", info.Agent, info.Stream, err)
	}
	data, err := json.Marshal(info)
	if err != nil {
		return fmt.Errorf("chunk: encode expiry marker: %w", err)
	}
	_, err = s.cfg.Log.Append(ctx, eventlog.Event{
		Agent: info.Agent, Stream: info.Stream, Type: EventExpired,
		ID: info.Stream + "/expired", Time: now.UTC(), Data: data,
	})
	if err != nil && !errors.Is(err, eventlog.ErrDuplicate) {
		return fmt.Errorf("chunk: mark %s/%s expired: %w", info.Agent, info.Stream, err)
	}
	s.logger.Debug("chunks expired", "agent", info.Agent, "stream", info.Stream, "ended", info.UpdatedAt)
	return nil
}
