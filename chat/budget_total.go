package chat

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"time"

	"github.com/forever-agents/forever/chat/cost"
	"github.com/forever-agents/forever/eventlog"
)

// The tenant's totals: a tenant's budget counts every agent's own spend
// in its period, and reading it from the agents' rows costs a seek per
// agent (4.8 ms at 300 agents, before every model call). The budget view
// therefore keeps every agent's own spend summed per minute, hour and day
// (UTC, aligned to the Unix epoch, as budget periods are), so the spend
// since a period's start is the day rows from the first day boundary at
// or after it, the hour rows before that, and the minute rows before
// those: at most a few dozen rows for periods up to days, however many
// agents spent. A period that is not a whole number of minutes starts
// off the minute and is read from the agents' rows.
//
// The totals equal the sum of the agents' spend rows (p\0...) at every
// commit of the view: usage.recorded adds its row to them, and the
// Follower's own changes of an agent's rows, a snapshot replacing them
// and a tombstone removing them, reach budgetRowsChanged, which takes the
// removed rows out and puts the added ones in. So a deleted agent's spend
// leaves the tenant's, as its rows do, and a view rebuilt from the log
// (events and snapshots) has the same totals (TestTenantTotalsFollowRows).

// totalLevels are the totals' bucket sizes, largest first: the order of
// their tags in key order too (d < h < m).
var totalLevels = [...]struct {
	tag byte
	d   time.Duration
}{{'d', 24 * time.Hour}, {'h', time.Hour}, {'m', time.Minute}}

func tenantTotalPrefix() []byte { return []byte("T\x00") }

func tenantTotalKey(tag byte, start int64) []byte {
	return binary.BigEndian.AppendUint64(append(tenantTotalPrefix(), tag), uint64(start))
}

// addTenantTotal adds sign times row's own spend (its tokens and cost
// without its sub-agents') to the totals of the minute, hour and day of
// at. A total that comes to zero is removed, so the rows equal a
// rebuild's, which never wrote it.
func addTenantTotal(b *eventlog.Batch, at time.Time, row budgetSpendRow, sign int64) error {
	tok, usd := row.Tokens-row.SubTokens, row.Cost-row.SubCost
	if tok == 0 && usd == 0 {
		return nil
	}
	n := max(at.UnixNano(), 0)
	for _, l := range totalLevels {
		key := tenantTotalKey(l.tag, n-n%int64(l.d))
		var t budgetSpendRow
		if _, err := getJSON(b, key, &t); err != nil {
			return err
		}
		t.Tokens += sign * tok
		t.Cost += cost.Micros(sign) * usd
		if t.Tokens == 0 && t.Cost == 0 {
			if err := b.Delete(key); err != nil {
				return err
			}
			continue
		}
		if err := setJSON(b, key, t); err != nil {
			return err
		}
	}
	return nil
}

// budgetRowsChanged keeps the totals when the Follower removes or sets an
// agent's rows itself (Projection.RowsChanged): out with the spend rows
// removed, in with those added.
func budgetRowsChanged(b *eventlog.Batch, agent string, removed, added []eventlog.KV) error {
	for _, c := range []struct {
		rows []eventlog.KV
		sign int64
	}{{removed, -1}, {added, 1}} {
		prefix := budgetSpendPrefix(agent)
		for _, kv := range c.rows {
			if !bytes.HasPrefix(kv.Key, prefix) || len(kv.Key) < len(prefix)+8 {
				continue
			}
			at := time.Unix(0, int64(binary.BigEndian.Uint64(kv.Key[len(prefix):])))
			var r budgetSpendRow
			if err := json.Unmarshal(kv.Value, &r); err != nil {
				return corrupt("budget spend row", err)
			}
			if err := addTenantTotal(b, at, r, c.sign); err != nil {
				return err
			}
		}
	}
	return nil
}

// ceilTo is the first multiple of d at or after n.
func ceilTo(n int64, d time.Duration) int64 {
	if r := n % int64(d); r != 0 {
		return n - r + int64(d)
	}
	return n
}

// BudgetSpendAll returns what every agent of the log spent since since on
// its own model calls (its sub-agents' are on their own rows): from the
// tenant's totals when since is on a minute, which every period of whole
// minutes starts on, else from every agent's rows.
func (s *Store) BudgetSpendAll(since time.Time) (BudgetSpend, error) {
	n := max(since.UnixNano(), 0)
	if n%int64(time.Minute) != 0 {
		return s.budgetSpendAllRows(since)
	}
	// Each level's range [lo, hi): days from the first day boundary at or
	// after since, hours up to it, minutes up to the first hour boundary.
	var lo, hi [len(totalLevels)]int64
	hi[0] = -1 // no end
	for i, l := range totalLevels {
		lo[i] = ceilTo(n, l.d)
		if i > 0 {
			hi[i] = lo[i-1]
		}
	}
	level := func(tag byte) int {
		for i, l := range totalLevels {
			if l.tag == tag {
				return i
			}
		}
		return -1
	}
	var sp BudgetSpend
	var bad error
	prefix := tenantTotalPrefix()
	err := s.budget.ScanSeek(prefix, func(kv eventlog.KV) ([]byte, bool) {
		rest := kv.Key[len(prefix):]
		i := -1
		if len(rest) == 9 {
			i = level(rest[0])
		}
		if i < 0 {
			bad = corrupt("budget total key", errors.New("not a level tag and a time"))
			return nil, true
		}
		at := int64(binary.BigEndian.Uint64(rest[1:]))
		switch {
		case at < lo[i]:
			return tenantTotalKey(totalLevels[i].tag, lo[i]), false
		case hi[i] >= 0 && at >= hi[i]:
			if i+1 == len(totalLevels) {
				return nil, true
			}
			return tenantTotalKey(totalLevels[i+1].tag, lo[i+1]), false
		}
		var r budgetSpendRow
		if err := json.Unmarshal(kv.Value, &r); err != nil {
			bad = corrupt("budget total row", err)
			return nil, true
		}
		sp.Tokens += r.Tokens
		sp.Cost += r.Cost
		// Seek past the row rather than step: a total is rewritten at
		// every usage of its bucket, and stepping walks every version of
		// it the memtable still holds.
		return append(append(make([]byte, 0, len(kv.Key)+1), kv.Key...), 0), false
	})
	return sp, errors.Join(err, bad)
}
