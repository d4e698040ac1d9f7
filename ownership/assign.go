package ownership

import (
	"hash/fnv"
	"slices"
	"strconv"
)

// PartitionOf returns the partition of agent among n: FNV-1a of the id,
// modulo n. It never changes for a cluster, since n is fixed when the
// cluster is created.
func PartitionOf(agent string, n int) int {
	h := fnv.New32a()
	h.Write([]byte(agent))
	return int(h.Sum32() % uint32(n))
}

// assign returns the node every partition should live on, given the live
// nodes: each partition goes to the highest-scoring node (rendezvous
// hashing) that has fewer than ceil(n/len(nodes)) partitions so far. Every
// node computes the same answer from the same set, and a node joining or
// leaving moves few partitions besides its own share.
func assign(n int, nodes []string) []string {
	out := make([]string, n)
	if len(nodes) == 0 {
		return out
	}
	nodes = slices.Clone(nodes)
	slices.Sort(nodes)
	limit := (n + len(nodes) - 1) / len(nodes)
	count := make(map[string]int, len(nodes))
	type cand struct {
		node  string
		score uint64
	}
	cands := make([]cand, len(nodes))
	for p := range n {
		for i, node := range nodes {
			cands[i] = cand{node, score(p, node)}
		}
		slices.SortFunc(cands, func(a, b cand) int {
			switch {
			case a.score > b.score:
				return -1
			case a.score < b.score:
				return 1
			}
			return 0
		})
		for _, c := range cands {
			if count[c.node] < limit {
				out[p] = c.node
				count[c.node]++
				break
			}
		}
	}
	return out
}

// score is the rendezvous weight of node for partition p.
func score(p int, node string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(strconv.Itoa(p)))
	h.Write([]byte{0})
	h.Write([]byte(node))
	// FNV's low bits mix poorly for short inputs: finish with a 64-bit mixer.
	x := h.Sum64()
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	x *= 0xc4ceb3f97a4fe63b
	x ^= x >> 33
	return x
}
