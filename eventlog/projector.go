package eventlog

import "context"

// Projector keeps one Projection up to date: it follows the log from the
// stored cursor+1 and commits each group of events' rows together with the
// new cursor in one synced Pebble batch. It is a Follower of one projection;
// use a Follower to keep several views of one stream with one consumer and
// one cursor to wait on. Create it with NewProjector and run it with Run;
// its other methods are safe for concurrent use.
type Projector struct {
	f    *Follower
	name string
}

// NewProjector prepares p. Names must be unique within the Log.
// Errors: ErrInvalid for a bad name, a missing Apply, a duplicate name or a
// Log without Dir.
func (l *Log) NewProjector(p Projection) (*Projector, error) {
	if l.cfg.Dir == "" {
		return nil, invalidf("projection %q: the log was opened without Dir", p.Name)
	}
	f, err := l.NewFollower()
	if err != nil {
		return nil, err
	}
	if err := f.Add(p); err != nil {
		return nil, err
	}
	return &Projector{f: f, name: p.Name}, nil
}

// Name returns the projection's name.
func (pr *Projector) Name() string { return pr.name }

// Ready is closed once the projection has caught up with the last matching
// event stored when Run started.
func (pr *Projector) Ready() <-chan struct{} { return pr.f.Ready() }

// Stream returns the name of the JetStream stream the projection reads.
func (pr *Projector) Stream() string { return pr.f.Stream() }

// Cursor returns the last stream sequence applied.
func (pr *Projector) Cursor() Seq { return pr.f.Cursor() }

// Cursors is Follower.Cursors.
func (pr *Projector) Cursors() []Seq { return pr.f.Cursors() }

// Changed is Follower.Changed.
func (pr *Projector) Changed() <-chan struct{} { return pr.f.Changed() }

// WaitFor blocks until the projection has applied sequence seq (an event that
// matches its filter), ctx is done (ctx's error), or Run returned: with
// Run's error, or an error wrapping ErrStopped when Run stopped because its
// ctx ended. While Pebble cannot write it keeps waiting (see
// Log.Stalled). A WaitFor before Run started waits for it.
func (pr *Projector) WaitFor(ctx context.Context, seq Seq) error { return pr.f.WaitFor(ctx, seq) }

// WaitDurable is WaitFor, then a sync of what the projection applied; see
// Follower.WaitDurable.
func (pr *Projector) WaitDurable(ctx context.Context, seq Seq) error {
	return pr.f.WaitDurable(ctx, seq)
}

// Rebuild drops the projection's rows and cursor and replays the log from
// sequence 1. It returns once the drop is committed and the replay started;
// use WaitFor or Cursor to see it progress. Run must be running.
func (pr *Projector) Rebuild(ctx context.Context) error { return pr.f.Rebuild(ctx, pr.name) }

// Run applies events until ctx is done (returning nil) or an Apply or Pebble
// error stops it. Corrupt stored events are skipped: logged, counted in
// forever_eventlog_corrupt_events_total, and the cursor moves past them, so
// the stream, which still holds them, loses nothing.
//
// Once Run returned, WaitFor no longer waits (see WaitFor).
func (pr *Projector) Run(ctx context.Context) error { return pr.f.Run(ctx) }
