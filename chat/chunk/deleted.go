package chunk

import (
	"encoding/json"
	"errors"
	"strconv"

	"github.com/forever-agents/forever/eventlog"
)

// deletedKey holds the sequence of an agent's latest chunks tombstone
// (eventlog.Delete): x/<agent>.
func deletedKey(agent string) []byte { return []byte("x/" + agent) }

// applyDeleted applies an agent's chunks tombstone: every stream of the
// agent leaves the view (its row, its entry in the ended index, the
// agent's latest stream), and the tombstone's sequence is kept, so an
// expiry marker of one of those streams that lands after it (retention
// racing the delete) does not bring the stream back. A view rebuilt from
// the log, where the purge left only the tombstone, ends the same.
func applyDeleted(b *eventlog.Batch, e eventlog.Event) error {
	if raw, err := b.Get(deletedKey(e.Agent)); err == nil {
		if seq, err := strconv.ParseUint(string(raw), 10, 64); err == nil && eventlog.Seq(seq) >= e.Seq {
			return nil // applied already: a bootstrapped view read past its cursor
		}
	} else if !errors.Is(err, eventlog.ErrNotFound) {
		return err
	}
	var rows []eventlog.KV
	for kv, err := range b.Scan([]byte("s/" + e.Agent + "/")) {
		if err != nil {
			return err
		}
		rows = append(rows, kv)
	}
	for _, kv := range rows {
		var info StreamInfo
		if json.Unmarshal(kv.Value, &info) == nil {
			if info.Agent != e.Agent {
				continue // agent "a/b" under the prefix of agent "a"
			}
			if k := endedKey(info); k != nil {
				if err := b.Delete(k); err != nil {
					return err
				}
			}
		}
		if err := b.Delete(kv.Key); err != nil {
			return err
		}
	}
	if err := b.Delete(latestKey(e.Agent)); err != nil {
		return err
	}
	return b.Set(deletedKey(e.Agent), []byte(strconv.FormatUint(uint64(e.Seq), 10)))
}

// deletedBefore reports whether a stream that started at first belongs to
// agent's life before its latest chunks tombstone. A first of 0 (a marker
// that said nothing) is not known to be older.
func deletedBefore(b *eventlog.Batch, agent string, first eventlog.Seq) (bool, error) {
	raw, err := b.Get(deletedKey(agent))
	if errors.Is(err, eventlog.ErrNotFound) || first == 0 {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	seq, err := strconv.ParseUint(string(raw), 10, 64)
	if err != nil {
		return false, &eventlog.CorruptError{What: "chunks tombstone of " + agent, Err: err}
	}
	return first < eventlog.Seq(seq), nil
}

// tombstones returns the latest chunks tombstone of each deleted agent
// among a bootstrap's subjects.
func tombstones(ends []eventlog.SubjectEnds) map[string]eventlog.Seq {
	out := map[string]eventlog.Seq{}
	for _, se := range ends {
		if isTombstone(se) && se.Last.Seq > out[se.Last.Agent] {
			out[se.Last.Agent] = se.Last.Seq
		}
	}
	return out
}

// isTombstone reports whether se is an agent's DeletedStream subject.
func isTombstone(se eventlog.SubjectEnds) bool {
	return se.Last.Seq != 0 && se.Last.Stream == eventlog.DeletedStream && se.Last.Type == eventlog.TypeDeleted
}

// deletedRow reports whether a bootstrapped stream row belongs to its
// agent's life before its latest tombstone, which a live view dropped (or
// never made): its first stored event (at) came before the tombstone, or
// it is an expiry marker's row of a stream that started before it.
func deletedRow(tombs map[string]eventlog.Seq, info StreamInfo, at eventlog.Seq) bool {
	t, ok := tombs[info.Agent]
	if !ok {
		return false
	}
	return at < t || info.FirstSeq != 0 && info.FirstSeq < t
}

// writeTombstones writes each deleted agent's tombstone sequence, as
// applyDeleted does.
func writeTombstones(b *eventlog.Batch, tombs map[string]eventlog.Seq) error {
	for agent, t := range tombs {
		if err := b.Set(deletedKey(agent), []byte(strconv.FormatUint(uint64(t), 10))); err != nil {
			return err
		}
	}
	return nil
}
