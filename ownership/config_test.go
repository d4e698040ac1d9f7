package ownership

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// TestDefaultGraceOutlastsTheElection: with a replicated bucket, a lease
// renewed a renewal period before the bucket's leader died is still valid
// on its holder (its deadline plus the election grace) when the longest
// election ends, whatever the TTL; a single-replica bucket elects nothing
// and keeps TTL/2. (setDefaults only checks that Conn is set.)
func TestDefaultGraceOutlastsTheElection(t *testing.T) {
	for _, ttl := range []time.Duration{time.Second, 3 * time.Second, 5 * time.Second, 10 * time.Second, 30 * time.Second} {
		c := Config{Conn: &nats.Conn{}, Node: "n", TTL: ttl, Replicas: 3}
		if err := c.setDefaults(); err != nil {
			t.Fatal(err)
		}
		valid := c.TTL - c.Margin + c.ElectionGrace // from the last renewal
		if valid-c.RenewEvery < BucketElection {
			t.Errorf("TTL %s: a lease renewed %s before the death is valid %s after it, less than an election (%s)",
				ttl, c.RenewEvery, valid-c.RenewEvery, BucketElection)
		}
		if c.ElectionGrace < ttl/2 {
			t.Errorf("TTL %s: grace %s below TTL/2", ttl, c.ElectionGrace)
		}
		one := Config{Conn: &nats.Conn{}, Node: "n", TTL: ttl}
		if err := one.setDefaults(); err != nil {
			t.Fatal(err)
		}
		if one.ElectionGrace != ttl/2 {
			t.Errorf("TTL %s, one replica: grace %s, want TTL/2", ttl, one.ElectionGrace)
		}
	}
}
