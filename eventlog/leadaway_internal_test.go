package eventlog

import (
	"slices"
	"testing"
)

// TestAwayFrom: each stream the server leads goes to its other current
// replica that leads fewest, counting what it was given; a stream led
// elsewhere, or with no other current replica, is left.
func TestAwayFrom(t *testing.T) {
	leaders := []string{"a", "a", "b", "a", "a"}
	current := [][]string{
		{"a", "b", "c"},
		{"a", "b", "c"},
		{"b", "a", "c"},
		{"a"},      // no other current replica
		{"a", "c"}, // c only
	}
	got := awayFrom("a", leaders, current)
	// b leads 1, c 0: the first goes to c, then b and c lead 1 each
	// (b first by name), the fifth can only go to c.
	want := []string{"c", "b", "", "", "c"}
	if !slices.Equal(got, want) {
		t.Errorf("awayFrom = %q, want %q", got, want)
	}
}
