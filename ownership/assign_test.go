package ownership

import (
	"fmt"
	"testing"
)

func TestAssignBalanced(t *testing.T) {
	for _, n := range []int{1, 7, 64, 256} {
		for k := 1; k <= 7; k++ {
			var nodes []string
			for i := range k {
				nodes = append(nodes, fmt.Sprintf("forever-%d", i))
			}
			got := assign(n, nodes)
			count := map[string]int{}
			for p, node := range got {
				if node == "" {
					t.Fatalf("n=%d k=%d: partition %d unassigned", n, k, p)
				}
				count[node]++
			}
			limit := (n + k - 1) / k
			for node, c := range count {
				if c > limit {
					t.Errorf("n=%d k=%d: %s has %d partitions, limit %d", n, k, node, c, limit)
				}
			}
		}
	}
}

// TestAssignStable: a node joining takes about its share and moves little
// else; the same set in another order gives the same assignment.
func TestAssignStable(t *testing.T) {
	three := assign(64, []string{"a", "b", "c"})
	if fmt.Sprint(three) != fmt.Sprint(assign(64, []string{"c", "a", "b"})) {
		t.Fatal("assignment depends on the order of nodes")
	}
	four := assign(64, []string{"a", "b", "c", "d"})
	moved := 0
	for p := range three {
		if three[p] != four[p] && four[p] != "d" {
			moved++
		}
	}
	// d takes 16; a few more move between the others to keep the cap.
	if moved > 16 {
		t.Errorf("%d partitions moved between old nodes when d joined", moved)
	}
}

func TestPartitionOf(t *testing.T) {
	seen := map[int]bool{}
	for i := range 1000 {
		p := PartitionOf(fmt.Sprintf("chat-%d", i), 64)
		if p < 0 || p >= 64 {
			t.Fatalf("partition %d out of range", p)
		}
		seen[p] = true
		if PartitionOf(fmt.Sprintf("chat-%d", i), 64) != p {
			t.Fatal("PartitionOf is not deterministic")
		}
	}
	if len(seen) != 64 {
		t.Errorf("1000 agents hit %d of 64 partitions", len(seen))
	}
}
