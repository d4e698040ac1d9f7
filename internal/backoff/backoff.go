// Package backoff computes the exponential waits between retries that
// fiber recovery hooks and keepalive schedule callbacks share.
package backoff

import "time"

// Exp is the wait before retry n (n >= 1): base doubled n-1 times, at most
// max.
func Exp(base, max time.Duration, n int) time.Duration {
	d := base
	for i := 1; i < n && d < max; i++ {
		d *= 2
	}
	return min(d, max)
}
