package eventlog

import (
	"encoding/json"
	"fmt"
	"iter"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// Quarantined is a stored event a projection could not decode and skipped.
// The event stays in its stream; the quarantine only records where it is,
// so an operator can look at it (nats stream get <stream> <seq>), repair or
// purge it, and rebuild the views it would have reached.
type Quarantined struct {
	Stream  string    `json:"stream"`
	Seq     Seq       `json:"seq"`
	Subject string    `json:"subject"`
	Views   []string  `json:"views"` // the projections it would have reached
	Error   string    `json:"error"`
	Time    time.Time `json:"time"` // when it was first skipped
}

// quarantineKey is where the quarantine row of (stream, seq) lives: outside
// every projection's prefix, so a projection's rebuild keeps it (and writes
// it again, unchanged but for Time, if the event is still corrupt).
func quarantineKey(stream string, seq Seq) []byte {
	return append([]byte("q\x00"+stream+"\x00"), encodeUint(uint64(seq))...)
}

// quarantine writes q into b, in the batch that moves the cursors past it.
func quarantine(b *pebble.Batch, q Quarantined) error {
	data, err := json.Marshal(q)
	if err != nil {
		return err
	}
	return b.Set(quarantineKey(q.Stream, q.Seq), data, nil)
}

// Quarantine yields the events the projections skipped as corrupt, by
// stream and sequence, and at most one error, last (as View.Scan).
func (l *Log) Quarantine() iter.Seq2[Quarantined, error] {
	return func(yield func(Quarantined, error) bool) {
		if l.cfg.Dir == "" {
			return
		}
		db, release, err := l.useDB()
		if err != nil {
			yield(Quarantined{}, err)
			return
		}
		defer release()
		for kv, err := range scan(db, []byte("q\x00"), nil) {
			if err != nil {
				yield(Quarantined{}, err)
				return
			}
			var q Quarantined
			if err := json.Unmarshal(kv.Value, &q); err != nil {
				err = &CorruptError{What: fmt.Sprintf("quarantine row %x", kv.Key), Err: err}
				yield(Quarantined{}, err)
				return
			}
			if !yield(q, nil) {
				return
			}
		}
	}
}
