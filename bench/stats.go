package main

import (
	"math"
	"slices"
	"time"
)

// percentile returns the p-th percentile (0 < p <= 100) of lat by the
// nearest-rank method. It sorts lat in place. Zero for an empty slice.
func percentile(lat []time.Duration, p float64) time.Duration {
	if len(lat) == 0 {
		return 0
	}
	if !slices.IsSorted(lat) {
		slices.Sort(lat)
	}
	rank := int(math.Ceil(p / 100 * float64(len(lat))))
	return lat[min(max(rank, 1), len(lat))-1]
}

// countOver returns how many of lat are over limit.
func countOver(lat []time.Duration, limit time.Duration) int {
	n := 0
	for _, d := range lat {
		if d > limit {
			n++
		}
	}
	return n
}

// micros converts d to microseconds.
func micros(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
