package eventlog

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"syscall"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// This file is what happens when Pebble cannot write (a full disk, a
// failing one). Pebble gives up on a failed WAL write: its commit pipeline
// is unusable and it calls Logger.Fatalf, which must not return. A commit of
// this package recovers that (commitView) and marks the Log broken: the
// failed batch was not acknowledged to anyone, every event it held is still
// in JetStream, and reads keep going to the old Pebble. The Followers stall
// (WaitFor answers with the failure instead of waiting) and wait in awaitDB
// until a probe write succeeds, then Pebble is closed and opened again (its
// WAL replay restores every synced commit) and the Followers resume from
// their stored cursors. Pebble's background writes (flushes, compactions,
// the MANIFEST) that fail still end the process, as Pebble intends; a
// restart rebuilds nothing that was acknowledged, since the views catch up
// from the log.

// probeInterval is how often awaitDB tries whether Pebble can write again.
const probeInterval = time.Second

// probeSize is the size of the probe file: enough that a store with no room
// for a commit fails it.
const probeSize = 64 << 10

// pebbleFatal is the panic value of pebbleLogger.Fatalf.
type pebbleFatal struct {
	msg string
	err error // the first error among Fatalf's arguments, if any
}

func (f pebbleFatal) cause() error {
	if f.err != nil {
		return f.err
	}
	return errors.New(f.msg)
}

// openDB opens Pebble on cfg.Dir.
func (l *Log) openDB() (*pebble.DB, error) {
	db, err := pebble.Open(l.cfg.Dir, dbOptions(l.cfg.FS, pebbleLogger{l.logger}))
	if err != nil {
		return nil, fmt.Errorf("eventlog: open pebble %s: %w", l.cfg.Dir, err)
	}
	return db, nil
}

// blockCacheSize is the size of Pebble's block cache. Pebble charges its
// memtables to the block cache (each reserves its size there until
// flushed), and with its defaults (an 8 MiB cache, memtables growing to 4
// MiB) a full memtable beside one being flushed leaves the cache no room:
// every point read and scan then read and decompressed its blocks from
// the file again (measured: after a store's second flush, not one block
// cache hit, and Pebble's reads 9% of a tool call's CPU). 64 MiB keeps the
// blocks of a store's hot rows; it is allocated as blocks are read.
const blockCacheSize = 64 << 20

// dbOptions are the Pebble options of the views' store.
func dbOptions(fs vfs.FS, logger pebble.Logger) *pebble.Options {
	return &pebble.Options{FS: fs, Logger: logger, CacheSize: blockCacheSize}
}

// commitView commits b as every projection write is committed: unsynced,
// with a WAL sync within viewSyncDelay (see there). A write Pebble cannot
// make breaks the Log (see broke) and returns an error wrapping
// ErrViewsStalled, and ErrStorageFull when the store is full.
func (l *Log) commitView(b *pebble.Batch) (err error) {
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
	if err := b.Commit(pebble.NoSync); err != nil {
		return err
	}
	l.committed()
	return nil
}

// broke records that Pebble failed to write because of cause, and returns
// the error the callers get until it is reopened.
func (l *Log) broke(cause error) error {
	err := fmt.Errorf("%w: %w", ErrViewsStalled, cause)
	if full(cause) {
		err = fmt.Errorf("%w: %w: %w", ErrViewsStalled, ErrStorageFull, cause)
	}
	l.mu.Lock()
	first := l.mu.broken == nil
	if first {
		l.mu.broken = err
		close(l.mu.breaks)
	}
	err = l.mu.broken
	l.mu.Unlock()
	if first {
		l.metrics.viewStalls.Inc()
		l.metrics.viewsStalled.Set(1)
		l.logger.Error("projections cannot write to Pebble; following stalls until a write succeeds again (nothing acknowledged is lost: the events stay in the log)",
			"dir", l.cfg.Dir, "err", cause.Error())
	}
	return err
}

// breaks returns a channel closed when Pebble fails a write: a Follower
// then starts over from its stored cursors once Pebble was reopened, since
// what it applied since the last sync may be lost.
func (l *Log) breaks() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.mu.breaks
}

// full reports whether err says the disk (or a quota) is full.
func full(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

// Stalled returns nil while Pebble writes. After a projection write failed
// (a full or failing disk) it returns an error wrapping ErrViewsStalled (and
// ErrStorageFull for a full disk), until Pebble writes again: callers refuse
// new work meanwhile.
func (l *Log) Stalled() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.mu.broken
}

// awaitDB returns at once when Pebble can write. Otherwise it waits until a
// probe write succeeds, reopens Pebble (one caller does; the others wait for
// it), and returns nil; or returns ctx's error, or ErrClosed.
func (l *Log) awaitDB(ctx context.Context) error {
	l.heal.Lock()
	defer l.heal.Unlock()
	for {
		if l.closed() {
			return ErrClosed
		}
		if l.Stalled() == nil {
			return nil
		}
		if err := l.probe(); err == nil {
			err := l.reopen()
			if err == nil {
				return nil
			}
			l.logger.Warn("reopening Pebble after a failed write", "err", err)
		}
		select {
		case <-time.After(probeInterval):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// probe writes, syncs and removes a file beside Pebble's.
func (l *Log) probe() error {
	fs := l.cfg.FS
	name := filepath.Join(l.cfg.Dir, "probe.tmp")
	f, err := fs.Create(name, "")
	if err != nil {
		return err
	}
	_, err = f.Write(make([]byte, probeSize))
	if err == nil {
		err = f.Sync()
	}
	return errors.Join(err, f.Close(), fs.Remove(name))
}

// reopen closes the broken Pebble and opens it again, while no read or
// commit uses it. REQUIRES: l.heal held.
func (l *Log) reopen() error {
	l.mu.Lock()
	if l.mu.closed {
		l.mu.Unlock()
		return ErrClosed
	}
	done := make(chan struct{})
	l.mu.swapping = done
	old := l.db
	l.mu.Unlock()
	l.dbUsers.Wait()

	if old != nil {
		if err := closeBroken(old); err != nil {
			l.logger.Info("closing the broken Pebble", "err", err.Error())
		}
	}
	db, err := l.openDB()
	l.mu.Lock()
	l.db = db // nil when the open failed: reads answer l.mu.broken
	if err == nil {
		l.mu.broken = nil
		l.mu.breaks = make(chan struct{})
		l.metrics.viewsStalled.Set(0)
	}
	l.mu.swapping = nil
	l.mu.Unlock()
	close(done)
	if err != nil {
		return err
	}
	l.logger.Info("Pebble reopened after a failed write; projections resume", "dir", l.cfg.Dir)
	return nil
}

// closeBroken closes a Pebble whose commit pipeline failed. Its Close may
// report the WAL's error, or give up with Fatalf.
func closeBroken(db io.Closer) (err error) {
	defer func() {
		if r := recover(); r != nil {
			f, ok := r.(pebbleFatal)
			if !ok {
				panic(r)
			}
			err = f.cause()
		}
	}()
	return db.Close()
}
