package kvwatch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Config is what Run follows and how.
type Config struct {
	// JS and Bucket name the bucket. Required.
	JS     jetstream.JetStream
	Bucket string
	// Apply is handed every entry. Required.
	Apply func(jetstream.KeyValueEntry)
	// Synced, if set, is called once per watch once the values at its
	// start are handed over; first is true for the first watch only.
	Synced func(first bool)
	// Check is how often the watch is compared with the bucket. Default 2 s.
	Check time.Duration
	// Lag is how long the watch may stay behind before it is made again.
	// Default 1 s.
	Lag time.Duration
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// OnRestart, if set, is called each time a lagging watch is made again
	// (a metric).
	OnRestart func()
}

// errLags ends a watch that fell behind.
var errLags = errors.New("kvwatch: the watch lags the bucket")

// Run follows the bucket until ctx ends, then returns nil. It returns an
// error if the bucket cannot be watched at all; a watch that ends later
// is made again after Check.
func Run(ctx context.Context, cfg Config) error {
	if cfg.JS == nil || cfg.Bucket == "" || cfg.Apply == nil {
		return errors.New("kvwatch: JS, Bucket and Apply are required")
	}
	if cfg.Check <= 0 {
		cfg.Check = 2 * time.Second
	}
	if cfg.Lag <= 0 {
		cfg.Lag = time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	kv, err := cfg.JS.KeyValue(ctx, cfg.Bucket)
	if err != nil {
		return fmt.Errorf("kvwatch: bucket %s: %w", cfg.Bucket, err)
	}
	w := &watch{cfg: cfg, kv: kv, stream: "KV_" + cfg.Bucket}
	for first := true; ; first = false {
		err := w.once(ctx, first)
		switch {
		case ctx.Err() != nil:
			return nil
		case errors.Is(err, errLags):
			cfg.Logger.Warn("watch lags its bucket; making it again", "bucket", cfg.Bucket, "seen", w.seen)
			if cfg.OnRestart != nil {
				cfg.OnRestart()
			}
		case first && w.seen == 0 && !w.synced:
			return err // never watched at all
		default:
			cfg.Logger.Error("watch ended; making it again", "bucket", cfg.Bucket, "err", err)
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(cfg.Check):
			}
		}
	}
}

// watch is Run's state across watches.
type watch struct {
	cfg    Config
	kv     jetstream.KeyValue
	stream string
	seen   uint64 // the newest revision delivered, or known delivered
	synced bool   // the first watch delivered the values at its start
}

// once runs one watch until ctx ends, it ends, or it lags (errLags).
func (w *watch) once(ctx context.Context, first bool) error {
	// Everything stored before the watch starts is in its initial values
	// (or was removed, as deletes purged): count it as seen once they are in.
	start, err := w.lastSeq(ctx)
	if err != nil {
		return err
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	kw, err := w.kv.WatchAll(wctx)
	if err != nil {
		return fmt.Errorf("kvwatch: watch %s: %w", w.cfg.Bucket, err)
	}
	defer kw.Stop()
	check := time.NewTicker(w.cfg.Check)
	defer check.Stop()
	var synced bool
	var behind time.Time
	for {
		select {
		case <-ctx.Done():
			return nil
		case e, ok := <-kw.Updates():
			if !ok {
				return fmt.Errorf("kvwatch: watch %s closed", w.cfg.Bucket)
			}
			if e == nil {
				synced = true
				w.synced = true
				w.seen = max(w.seen, start)
				if w.cfg.Synced != nil {
					w.cfg.Synced(first)
				}
				continue
			}
			w.seen = max(w.seen, e.Revision())
			w.cfg.Apply(e)
		case <-check.C:
			if !synced {
				continue
			}
			last, err := w.lastSeq(ctx)
			if err != nil || last <= w.seen {
				behind = time.Time{}
				continue
			}
			if behind.IsZero() {
				behind = time.Now()
			} else if time.Since(behind) >= w.cfg.Lag {
				return errLags
			}
		}
	}
}

// lastSeq asks the bucket's leader for its last sequence.
func (w *watch) lastSeq(ctx context.Context) (uint64, error) {
	ictx, cancel := context.WithTimeout(ctx, w.cfg.Check)
	defer cancel()
	st, err := w.cfg.JS.Stream(ictx, w.stream)
	if err != nil {
		return 0, fmt.Errorf("kvwatch: %s: %w", w.stream, err)
	}
	return st.CachedInfo().State.LastSeq, nil
}
