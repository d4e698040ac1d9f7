package eventlog

import (
	"context"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// viewSyncDelay bounds how long a projection commit stays unsynced.
//
// A projection commit is written to Pebble's WAL without an fsync, and the
// WAL is synced in the background at most this long after, once for all
// the commits made meanwhile, or at once when something needs it (WaitDurable,
// a purge). Synced at every commit, the views' fsync landed right when the
// next append's fsync was due, on the same disk: an Append with the runs
// view following took 1.45-1.50x a raw synced publish, 1.24-1.28x with
// unsynced commits, 1.05x with no view (eventlog probe, sync always,
// 4,000 appends each). Visibility does not wait for the fsync: a commit is
// readable, and WaitFor returns, once it is in the memtable.
//
// What an unsynced commit risks is bounded: a crash below the page cache
// loses at most the last viewSyncDelay of commits, whole (a Pebble batch
// is atomic in the WAL), and the view resumes from its older cursor and
// applies them again from the stream, which still holds them: every purge
// of the streams syncs the views first.
const viewSyncDelay = 10 * time.Millisecond

// viewSync schedules the background WAL sync of projection commits.
type viewSync struct {
	mu        sync.Mutex
	committed uint64      // commits made
	synced    uint64      // commits a finished sync covered
	timer     *time.Timer // the pending background sync; nil when none
	stopped   bool
}

// committed notes one unsynced commit and makes sure a sync follows within
// viewSyncDelay.
func (l *Log) committed() {
	vs := &l.vsync
	vs.mu.Lock()
	defer vs.mu.Unlock()
	vs.committed++
	if vs.timer == nil && !vs.stopped {
		vs.timer = time.AfterFunc(viewSyncDelay, func() {
			vs.mu.Lock()
			vs.timer = nil
			vs.mu.Unlock()
			// An error broke the Log (see broke): the Followers stall at
			// their next commit and resume after a reopen.
			_ = l.syncViews(context.Background())
		})
	}
}

// syncViews makes every projection commit made before it durable: one WAL
// fsync, unless nothing is unsynced. A write Pebble cannot make breaks the
// Log, as a failed commit does (ErrViewsStalled). Without Dir, or after
// Close, it does nothing.
func (l *Log) syncViews(ctx context.Context) (err error) {
	if l.db == nil || !l.syncWAL {
		return nil
	}
	if err := l.Stalled(); err != nil {
		return err
	}
	vs := &l.vsync
	vs.mu.Lock()
	target := vs.committed
	done := vs.synced >= target
	vs.mu.Unlock()
	if done {
		return nil
	}
	db, release, err := l.useDB()
	if err != nil {
		if err == ErrClosed {
			return nil
		}
		return err
	}
	defer release()
	if err := l.syncDB(db); err != nil {
		return err
	}
	vs.mu.Lock()
	vs.synced = max(vs.synced, target)
	vs.mu.Unlock()
	return nil
}

// syncDB syncs db's WAL: an empty log record, synced, so every commit
// before it is durable. A write Pebble cannot make breaks the Log.
func (l *Log) syncDB(db *pebble.DB) (err error) {
	defer func() {
		r := recover()
		if r == nil {
			return
		}
		f, ok := r.(pebbleFatal)
		if !ok {
			panic(r)
		}
		err = l.broke(f.cause())
	}()
	return db.LogData(nil, pebble.Sync)
}

// stopViewSync cancels the pending background sync; Close syncs itself.
func (l *Log) stopViewSync() {
	vs := &l.vsync
	vs.mu.Lock()
	defer vs.mu.Unlock()
	vs.stopped = true
	if vs.timer != nil {
		vs.timer.Stop()
		vs.timer = nil
	}
}
