package ownership_test

import (
	"testing"

	"github.com/forever-agents/forever/ownership"
)

// TestParseLeaseEntry: a lease key's put names its holder and epoch (the
// revision for a lease written before epochs); its delete, or a value
// that does not decode, is the partition with no holder; another key is
// no lease.
func TestParseLeaseEntry(t *testing.T) {
	for _, tc := range []struct {
		key, value     string
		deleted        bool
		want           ownership.Lease
		wantHeld, isOK bool
	}{
		{"lease.7", `{"node":"forever-1","epoch":3}`, false, ownership.Lease{Partition: 7, Node: "forever-1", Epoch: 3}, true, true},
		{"lease.7", `{"node":"forever-1"}`, false, ownership.Lease{Partition: 7, Node: "forever-1", Epoch: 42}, true, true},
		{"lease.7", ``, true, ownership.Lease{Partition: 7}, false, true},
		{"lease.7", `not json`, false, ownership.Lease{Partition: 7}, false, true},
		{"node.forever-1", `{}`, false, ownership.Lease{}, false, false},
		{"lease.x", `{"node":"forever-1"}`, false, ownership.Lease{}, false, false},
		{"config.partitions", `64`, false, ownership.Lease{}, false, false},
	} {
		got, ok := ownership.ParseLeaseEntry(tc.key, []byte(tc.value), 42, tc.deleted)
		if held := got.Node != ""; got != tc.want || held != tc.wantHeld || ok != tc.isOK {
			t.Errorf("ParseLeaseEntry(%q, %q, deleted %t) = %+v, held %t, ok %t; want %+v, %t, %t",
				tc.key, tc.value, tc.deleted, got, got.Node != "", ok, tc.want, tc.wantHeld, tc.isOK)
		}
	}
}
