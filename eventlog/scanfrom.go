package eventlog

import (
	"bytes"
	"fmt"
	"iter"

	"github.com/cockroachdb/pebble/v2"
)

// ScanFrom is Scan starting at the first row whose key is at least from
// (keys relative to the projection, as Scan yields them): the rows under
// prefix with key >= from, in key order. A from below prefix starts at
// prefix. It is how a paged listing resumes after its cursor without
// reading the rows before it. Errors are yielded as in Scan.
func (v *View) ScanFrom(prefix, from []byte) iter.Seq2[KV, error] {
	return func(yield func(KV, error) bool) {
		db, release, err := v.l.useDB()
		if err != nil {
			yield(KV{}, err)
			return
		}
		defer release()
		scanFrom(db, v.prefix, prefix, from)(yield)
	}
}

// scanFrom is scan with a lower bound of base+from when that is above
// base+prefix.
func scanFrom(r pebble.Reader, base, prefix, from []byte) iter.Seq2[KV, error] {
	return func(yield func(KV, error) bool) {
		start := joinKey(base, prefix)
		end := prefixEnd(start)
		lower := start
		if f := joinKey(base, from); bytes.Compare(f, lower) > 0 {
			lower = f
		}
		if end != nil && bytes.Compare(lower, end) >= 0 {
			return
		}
		it, err := r.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: end})
		if err != nil {
			yield(KV{}, fmt.Errorf("eventlog: scan: %w", err))
			return
		}
		stopped := false
		for ok := it.First(); ok; ok = it.Next() {
			if !yield(KV{Key: bytes.Clone(it.Key()[len(base):]), Value: bytes.Clone(it.Value())}, nil) {
				stopped = true
				break
			}
		}
		if err := it.Close(); err != nil && !stopped {
			yield(KV{}, fmt.Errorf("eventlog: scan: %w", err))
		}
	}
}

// ScanSeek visits the rows under prefix in key order (keys relative to
// the projection) through one iterator, and lets visit skip ahead: visit
// returns the key to go on from, at least the next row's (nil: the next
// row), or stop to end the scan. It is how a reader sums a range of each
// of many groups of rows (one seek a group) without an iterator per
// group. The KV visit gets is valid only during the call.
func (v *View) ScanSeek(prefix []byte, visit func(kv KV) (next []byte, stop bool)) error {
	db, release, err := v.l.useDB()
	if err != nil {
		return err
	}
	defer release()
	start := joinKey(v.prefix, prefix)
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: start, UpperBound: prefixEnd(start)})
	if err != nil {
		return fmt.Errorf("eventlog: scan: %w", err)
	}
	base := len(v.prefix)
	for ok := it.First(); ok; {
		next, stop := visit(KV{Key: it.Key()[base:], Value: it.Value()})
		if stop {
			break
		}
		if next == nil {
			ok = it.Next()
		} else {
			ok = it.SeekGE(joinKey(v.prefix, next))
		}
	}
	if err := it.Close(); err != nil {
		return fmt.Errorf("eventlog: scan: %w", err)
	}
	return nil
}
