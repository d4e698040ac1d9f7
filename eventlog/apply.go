package eventlog

import (
	"fmt"
	"log/slog"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// ApplyInMemory applies events, in order, to an empty view of p kept in
// memory, the way a Projector applies them (Seq, Time and the other fields
// as given), and returns the view's rows in key order. It needs no log and
// writes no file: use it to test a projection's Apply, its determinism or
// that no stored event can make it fail (the fuzz targets do).
//
// The first Apply error is returned, wrapped with the event's type and
// sequence, together with the rows written before it. A panic in Apply is
// not recovered. The caller owns the returned slices.
func ApplyInMemory(p Projection, events []Event) ([]KV, error) {
	if p.Apply == nil {
		return nil, invalidf("projection %q: need an Apply func", p.Name)
	}
	db, err := pebble.Open("", &pebble.Options{FS: vfs.NewMem(), Logger: pebbleLogger{slog.New(slog.DiscardHandler)}})
	if err != nil {
		return nil, fmt.Errorf("eventlog: open in-memory pebble: %w", err)
	}
	defer db.Close()
	b := db.NewIndexedBatch()
	defer b.Close()
	pb := &Batch{b: b, prefix: []byte{'d'}}
	var applyErr error
	for _, e := range events {
		if err := p.Apply(pb, e); err != nil {
			applyErr = fmt.Errorf("apply %s at seq %d: %w", e.Type, e.Seq, err)
			break
		}
	}
	pb.runAfter()
	var rows []KV
	for kv, err := range pb.Scan(nil) {
		if err != nil {
			return rows, err
		}
		rows = append(rows, kv)
	}
	return rows, applyErr
}
