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
//
// Few, not none: the bound filled in partition order moves some
// partitions between nodes that stay (when a node leaves, the bound
// grows and a partition that found its best node full goes back to it).
// assignKeeping moves none.
func assign(n int, nodes []string) []string { return assignKeeping(n, nodes, nil) }

// assignKeeping is assign that first keeps each partition with its holder
// (holders[p], "" for none) while the holder is live and below the bound,
// in partition order; the rest go as assign places them, among the
// nodes still below it. A node leaving then moves only its own
// partitions, never one between two nodes that stay. A node joining
// takes partitions only from nodes above the new bound (each keeps its
// first ceil(n/len(nodes)) in partition order), and such a partition
// goes to the best-scoring node with room: the joining one, unless a
// node that stays has room too (rare: TestAssignKeepingMovesOnlyTheLeaversShare).
// Where the holders are assign's answer for the same nodes, so is the
// result: switching to it on a running cluster moves nothing. Nil
// holders is assign.
func assignKeeping(n int, nodes, holders []string) []string {
	out := make([]string, n)
	if len(nodes) == 0 {
		return out
	}
	nodes = slices.Clone(nodes)
	slices.Sort(nodes)
	limit := (n + len(nodes) - 1) / len(nodes)
	count := make(map[string]int, len(nodes))
	for _, node := range nodes {
		count[node] = 0
	}
	for p, h := range holders {
		if c, live := count[h]; live && p < n && c < limit {
			out[p] = h
			count[h]++
		}
	}
	type cand struct {
		node  string
		score uint64
	}
	cands := make([]cand, len(nodes))
	for p := range n {
		if out[p] != "" {
			continue
		}
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
