package eventlog

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
)

// A view keeps its cursor under one key for an unsharded log (c) and
// under one key per shard for a sharded one (c0, c1, ...). Views built
// from one layout are no views of the other: their rows came from streams
// the other does not follow (a move into shards copies every message to
// new sequences). Open drops every view whose stored cursor is of the
// other layout, so it is rebuilt from the log it follows now
// (TestMoveRebuildsTheViews).

// dropOtherLayout deletes the rows, version and cursors of every view in
// db whose cursor key is of the other layout than l's, in one synced
// batch, and returns their names.
func (l *Log) dropOtherLayout(db *pebble.DB) ([]string, error) {
	other := []byte{'c', '0'} // a sharded cursor, in an unsharded log
	if l.sharded() {
		other = []byte{'c'} // an unsharded cursor, in a sharded log
	}
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: []byte("p\x00"), UpperBound: prefixEnd([]byte("p\x00"))})
	if err != nil {
		return nil, err
	}
	var drop [][]byte
	var names []string
	for ok := it.First(); ok; {
		key := it.Key()
		end := bytes.IndexByte(key[2:], 0)
		if end < 0 {
			ok = it.Next()
			continue
		}
		base := bytes.Clone(key[:2+end+1])
		if _, err := get(db, append(bytes.Clone(base), other...)); err == nil {
			drop = append(drop, base)
			names = append(names, string(base[2:len(base)-1]))
		} else if !errors.Is(err, ErrNotFound) {
			it.Close()
			return nil, err
		}
		ok = it.SeekGE(prefixEnd(base))
	}
	if err := it.Close(); err != nil {
		return nil, err
	}
	if len(drop) == 0 {
		return nil, nil
	}
	b := db.NewBatch()
	defer b.Close()
	for _, base := range drop {
		if err := b.DeleteRange(base, prefixEnd(base), nil); err != nil {
			return nil, err
		}
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return nil, fmt.Errorf("eventlog: drop the views of the other layout: %w", err)
	}
	return names, nil
}
