package eventlog

import (
	"fmt"
	"log/slog"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestBlockCacheUnderFullMemtables: the views' store keeps read blocks in
// its block cache while its memtables are full and one is being flushed,
// which is how it runs under a steady write load: a row read again and
// again out of a flushed table is a cache hit, not a read of the file.
// Pebble charges memtables to the block cache; with its default cache
// that state left no room and every read missed (blockCacheSize).
func TestBlockCacheUnderFullMemtables(t *testing.T) {
	if got := blockCacheHits(t, dbOptions(vfs.NewMem(), pebbleLogger{slog.New(slog.DiscardHandler)})); got < 100 {
		t.Fatalf("%d block cache hits of 100 reads of a flushed row under full memtables, want at least 100 (a data block each)", got)
	}
}

// blockCacheHits fills a store with o until its memtables are full,
// keeping one unflushed, reads a row of a flushed table 100 times and
// returns the block cache hits those reads made.
func blockCacheHits(t *testing.T, o *pebble.Options) int64 {
	t.Helper()
	db, err := pebble.Open("db", o)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	val := make([]byte, 1024)
	put := func(from, to int) {
		b := db.NewBatch()
		for i := from; i < to; i++ {
			if err := b.Set(fmt.Appendf(nil, "row/%08d", i), val, nil); err != nil {
				t.Fatal(err)
			}
		}
		if err := b.Commit(pebble.NoSync); err != nil {
			t.Fatal(err)
		}
	}
	// 24 MiB of rows in 64 KiB batches: memtables rotate and grow to
	// their full size.
	const rows = 24 << 10
	for i := 0; i < rows; i += 64 {
		put(i, i+64)
	}
	if err := db.Flush(); err != nil {
		t.Fatal(err)
	}
	// Full memtables again, not flushed: as under a steady load.
	for i := rows; i < rows+(6<<10); i += 64 {
		put(i, i+64)
	}
	read := func() {
		v, c, err := db.Get([]byte("row/00000007"))
		if err != nil || len(v) != len(val) {
			t.Fatalf("get: %d bytes, %v", len(v), err)
		}
		c.Close()
	}
	read() // loads the row's blocks
	before := db.Metrics().BlockCache.Hits
	for range 100 {
		read()
	}
	return db.Metrics().BlockCache.Hits - before
}
