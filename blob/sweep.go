package blob

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/tracing"
)

// DefaultGrace is how long an object no event names is kept after its
// last Put (1h).
const DefaultGrace = time.Hour

// Sweeper bounds.
const (
	minSweepInterval = time.Second
	maxSweepInterval = 10 * time.Minute
)

// ErrIncomplete is returned by Sweep when the references view cannot be
// trusted to name every object in use (the log is stalled, or an event
// the view should have read was quarantined): nothing is deleted.
var ErrIncomplete = errors.New("blob: the references view is incomplete")

// Views is what a Sweeper waits on: the Follower that keeps RefsView.
type Views interface {
	WaitFor(ctx context.Context, seq eventlog.Seq) error
}

// SweeperConfig configures NewSweeper.
type SweeperConfig struct {
	// Store is the bucket swept. Required.
	Store *Store
	// Log is the event log whose Views keep RefsView. Required.
	Log *eventlog.Log
	// Views is the Follower RefsView is registered on. Required.
	Views Views
	// Grace is how long an object no event names is kept after it was
	// last put: a Put stores the object before the event that names it
	// is appended, so an event appended within Grace of its Put never
	// names a swept object. Default DefaultGrace.
	Grace time.Duration
	// Interval between sweeps in Run. Default Grace/4, between 1s and
	// 10m.
	Interval time.Duration
	// Sweeps reports whether this node sweeps now (agentd: the owner of
	// partition 0). Nil: always. Two nodes sweeping at once is safe.
	Sweeps func() bool
	// Now is the clock (time.Now when nil).
	Now        func() time.Time
	Logger     *slog.Logger
	Registerer prometheus.Registerer
	// TracerProvider traces each sweep (a "blob sweep" span); nil: off.
	TracerProvider trace.TracerProvider
}

// Validate reports a config NewSweeper refuses.
func (c *SweeperConfig) Validate() error {
	switch {
	case c.Store == nil || c.Log == nil || c.Views == nil:
		return errors.New("blob: a sweeper needs Store, Log and Views")
	case c.Grace < 0 || c.Interval < 0:
		return errors.New("blob: a sweeper's Grace and Interval must not be negative")
	}
	return nil
}

// Sweeper deletes the objects no stored event names any more, once they
// are older than the grace period. See the package doc for its invariant.
type Sweeper struct {
	cfg    SweeperConfig
	logger *slog.Logger
	tracer tracing.Tracer
	swept  prometheus.Counter
	bytes  prometheus.Counter
	kept   prometheus.Counter
}

// NewSweeper returns a Sweeper; Run runs it.
func NewSweeper(cfg SweeperConfig) (*Sweeper, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Grace == 0 {
		cfg.Grace = DefaultGrace
	}
	if cfg.Interval == 0 {
		cfg.Interval = min(max(cfg.Grace/4, minSweepInterval), maxSweepInterval)
	}
	if cfg.Sweeps == nil {
		cfg.Sweeps = func() bool { return true }
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	s := &Sweeper{
		cfg:    cfg,
		logger: cfg.Logger.With("subsystem", "blob sweeper"),
		tracer: tracing.New(cfg.TracerProvider, "blob"),
		swept: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "forever_blobs_swept_total",
			Help: "Objects of the blob bucket deleted because no stored event names them any more.",
		}),
		bytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "forever_blobs_swept_bytes_total",
			Help: "Bytes of the objects of the blob bucket deleted because no stored event names them any more.",
		}),
		kept: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "forever_blobs_sweep_kept_total",
			Help: "Objects no stored event names that a sweep kept: younger than the grace period, or put again while it was deleting them.",
		}),
	}
	if cfg.Registerer != nil {
		for _, c := range []prometheus.Collector{s.swept, s.bytes, s.kept} {
			if err := cfg.Registerer.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return s, nil
}

// Run sweeps every Interval while Sweeps reports true, until ctx is done;
// then it returns nil. A failed sweep is logged and tried again at the
// next tick.
func (s *Sweeper) Run(ctx context.Context) error {
	t := time.NewTicker(s.cfg.Interval)
	defer t.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if !s.cfg.Sweeps() {
			continue
		}
		// A sweep waits for the views: bounded, so that a stalled view
		// does not hold the loop (the next tick tries again).
		sctx, cancel := context.WithTimeout(ctx, max(s.cfg.Interval, time.Minute))
		sw, err := s.Sweep(sctx)
		cancel()
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil && !failing:
			s.logger.Warn("blob sweep failed; trying again", "err", err)
		case err == nil && sw.Deleted > 0:
			s.logger.Info("blobs swept", "deleted", sw.Deleted, "bytes", sw.Bytes, "kept", sw.Kept)
		}
		failing = err != nil
	}
}

// Swept reports one Sweep.
type Swept struct {
	// Objects is how many objects the bucket held; Referenced how many of
	// them some stored event names.
	Objects, Referenced int
	// Deleted objects, of Bytes in all; Kept: unnamed but younger than
	// the grace period, or touched by a Put while being deleted.
	Deleted, Kept int
	Bytes         int64
}

// Sweep deletes every object no stored event names that was last put
// before now minus the grace period. It first waits until the views have
// applied every event stored when it starts, so the references it reads
// include every event appended before; an event appended later names an
// object put within the grace period (or touched, which makes the delete
// lose), which it keeps.
//
// Errors: ErrIncomplete (nothing is deleted), a log or bucket error.
func (s *Sweeper) Sweep(ctx context.Context) (Swept, error) {
	return s.SweepAt(ctx, s.cfg.Now())
}

// SweepAt is Sweep as if the time were now: it deletes what was last put
// before now minus the grace period.
func (s *Sweeper) SweepAt(ctx context.Context, now time.Time) (sw Swept, err error) {
	ctx, span := s.tracer.Start(ctx, "blob sweep")
	defer func() {
		if span.IsRecording() {
			span.SetAttributes(attribute.Int("forever.blobs.objects", sw.Objects),
				attribute.Int("forever.blobs.referenced", sw.Referenced),
				attribute.Int("forever.blobs.deleted", sw.Deleted),
				attribute.Int("forever.blobs.kept", sw.Kept))
			if err != nil {
				span.RecordError(err)
				span.SetStatus(codes.Error, err.Error())
			}
		}
		span.End()
	}()
	return s.sweep(ctx, now)
}

func (s *Sweeper) sweep(ctx context.Context, now time.Time) (Swept, error) {
	cutoff := now.Add(-s.cfg.Grace)
	lg := s.cfg.Log
	if err := lg.Stalled(); err != nil {
		return Swept{}, fmt.Errorf("%w: %w", ErrIncomplete, err)
	}
	last, err := lg.LastSeq(ctx, eventlog.Filter{})
	if err != nil {
		return Swept{}, err
	}
	if err := s.cfg.Views.WaitFor(ctx, last); err != nil {
		return Swept{}, err
	}
	for q, err := range lg.Quarantine() {
		if err != nil {
			return Swept{}, err
		}
		for _, v := range q.Views {
			if v == ViewName {
				return Swept{}, fmt.Errorf("%w: event %d of %s was quarantined (%s)", ErrIncomplete, q.Seq, q.Subject, q.Error)
			}
		}
	}
	view, err := lg.View(ViewName)
	if err != nil {
		return Swept{}, err
	}
	used, err := Referenced(view)
	if err != nil {
		return Swept{}, err
	}
	objs, err := s.cfg.Store.Objects(ctx)
	if err != nil {
		return Swept{}, err
	}
	sw := Swept{Objects: len(objs)}
	for _, o := range objs {
		name, err := o.Name()
		if err != nil {
			continue // not an object of ours
		}
		if used[name] {
			sw.Referenced++
			continue
		}
		ok, err := s.cfg.Store.DeleteUntouched(ctx, o.Ref, cutoff)
		if err != nil {
			return sw, err
		}
		if !ok {
			sw.Kept++
			s.kept.Inc()
			continue
		}
		sw.Deleted++
		sw.Bytes += o.Size
		s.swept.Inc()
		s.bytes.Add(float64(o.Size))
		s.logger.Debug("blob swept", "digest", o.Digest, "size", o.Size)
	}
	return sw, nil
}
