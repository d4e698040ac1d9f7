package ownership

import (
	"encoding/json"
	"testing"
)

// FuzzParseLease: any key and value read from the leases bucket parse to a
// lease with a holder and a non-negative partition, or are ignored, never a
// panic; a stored lease parses back to itself.
func FuzzParseLease(f *testing.F) {
	f.Add("lease.3", []byte(`{"node":"n1","epoch":7}`), uint64(9))
	f.Add("lease.0", []byte(`{"node":"n1"}`), uint64(4))
	f.Add("lease.-1", []byte(`{"node":""}`), uint64(1))
	f.Add("node.n1", []byte(`{`), uint64(0))
	f.Fuzz(func(t *testing.T, key string, value []byte, rev uint64) {
		l, ok := parseLease(key, value, rev)
		if ok && (l.Partition < 0 || l.Node == "") {
			t.Fatalf("parseLease(%q, %q) = %+v", key, value, l)
		}
		if !ok || l.Epoch == 0 {
			return
		}
		v, _ := json.Marshal(leaseValue{Node: l.Node, Epoch: l.Epoch})
		back, ok := parseLease(leaseKey(l.Partition), v, rev+1)
		if !ok || back != l {
			t.Fatalf("round trip of %+v: %+v, %v", l, back, ok)
		}
	})
}
