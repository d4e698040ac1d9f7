package ownership

import (
	"encoding/json"
	"strconv"
	"strings"
)

// Lease is a node's hold on a partition.
type Lease struct {
	Partition int
	// Node is the holder's name.
	Node string
	// Epoch counts the partition's acquisitions: it grows by one with
	// every acquisition (see epoch.go) and stays the same across renewals.
	Epoch uint64
}

// leaseValue is the stored value of a lease key. Epoch 0 is a lease written
// before epochs were counted, without it until its first renewal: its epoch
// is the revision of its acquiring write.
type leaseValue struct {
	Node  string `json:"node"`
	Epoch uint64 `json:"epoch,omitempty"`
}

// Keys of the bucket.
const (
	keyPartitions = "config.partitions"
	prefixLease   = "lease."
	prefixNode    = "node."
)

func leaseKey(p int) string { return prefixLease + strconv.Itoa(p) }

// ParseLeaseEntry reads an entry of the lease bucket as a reader outside
// the cluster's nodes sees it (chaos's stall watch follows who holds
// what): ok is false for a key that is not a lease; the Lease names no
// Node for a lease deleted (a handoff) or expired, and for a value that
// does not decode.
func ParseLeaseEntry(key string, value []byte, rev uint64, deleted bool) (l Lease, ok bool) {
	s, isLease := strings.CutPrefix(key, prefixLease)
	p, err := strconv.Atoi(s)
	if !isLease || err != nil || p < 0 {
		return Lease{}, false
	}
	if !deleted {
		if l, held := parseLease(key, value, rev); held {
			return l, true
		}
	}
	return Lease{Partition: p}, true
}

// parseLease decodes a lease key's entry at revision rev.
func parseLease(key string, value []byte, rev uint64) (Lease, bool) {
	p, err := strconv.Atoi(strings.TrimPrefix(key, prefixLease))
	if err != nil || p < 0 {
		return Lease{}, false
	}
	var v leaseValue
	if json.Unmarshal(value, &v) != nil || v.Node == "" {
		return Lease{}, false
	}
	if v.Epoch == 0 {
		v.Epoch = rev
	}
	return Lease{Partition: p, Node: v.Node, Epoch: v.Epoch}, true
}
