package auth

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/forever-agents/forever/internal/apierror"
)

// Unlimited in a Quota field means no limit; zero means the node's
// default (Quota.Resolve).
const Unlimited = -1

// MaxModelWeight is the largest Quota.ModelWeight.
const MaxModelWeight = 1000

// ErrInvalidQuota is returned by Quota.Validate and ParseLimit for a
// negative limit other than Unlimited, or one that is not a number.
var ErrInvalidQuota error = apierror.Declare("auth", apierror.BadRequest, "invalid quota")

// Quota bounds what a tenant may use. As stored in a tenant's record a
// zero field is the node's default (agentd's --tenant-default-* flags) and
// Unlimited (-1) is no limit; Resolve turns it into the quota enforced.
//
// Rate, Burst, Turns, Agents and Bytes are enforced by agentd (package
// agentd/quota) before a command writes; Bytes and Memory, Conns,
// Streams and Consumers are also the tenant account's limits, enforced
// by the NATS server; Subs and Payload bound each client credential's
// connections, from the credentials minted after they are set.
type Quota struct {
	Rate   float64 `json:"rate,omitempty"`   // requests per second
	Burst  int     `json:"burst,omitempty"`  // requests above Rate at once (default max(1, Rate))
	Turns  int     `json:"turns,omitempty"`  // concurrent chat turns
	Agents int     `json:"agents,omitempty"` // agents with state
	Bytes  int64   `json:"bytes,omitempty"`  // bytes stored in JetStream (file storage)

	Memory    int64 `json:"memory,omitempty"`    // bytes of JetStream memory storage
	Conns     int64 `json:"conns,omitempty"`     // connections to the account, agentd's own (two a node) included
	Subs      int64 `json:"subs,omitempty"`      // subscriptions of each client connection
	Payload   int64 `json:"payload,omitempty"`   // bytes of a message a client publishes
	Streams   int64 `json:"streams,omitempty"`   // JetStream streams (agentd's: events, chunks, KV buckets)
	Consumers int64 `json:"consumers,omitempty"` // JetStream consumers, agentd's own (views, followers) included

	// ModelWeight is the tenant's weight in the sharing of the model's
	// rate limits (agentd --model-limit, package modellimit): under
	// contention a tenant of weight 3 gets three times the calls of one
	// of weight 1. Not a limit: 0 is weight 1, and no default applies.
	ModelWeight int `json:"modelWeight,omitempty"`
}

// Weight is q's model weight, at least 1.
func (q Quota) Weight() int { return max(q.ModelWeight, 1) }

// quotaFields lists Quota's limits by the name tenant create's flag
// gives them, for Validate and Resolve.
func (q *Quota) fields() []struct {
	name string
	i    *int64
	n    *int
} {
	return []struct {
		name string
		i    *int64
		n    *int
	}{
		{name: "burst", n: &q.Burst}, {name: "max-turns", n: &q.Turns}, {name: "max-agents", n: &q.Agents},
		{name: "max-bytes", i: &q.Bytes}, {name: "max-memory", i: &q.Memory}, {name: "max-conns", i: &q.Conns},
		{name: "max-subs", i: &q.Subs}, {name: "max-payload", i: &q.Payload}, {name: "max-streams", i: &q.Streams},
		{name: "max-consumers", i: &q.Consumers},
	}
}

// Validate refuses a negative limit other than Unlimited, and a rate that
// is not a finite number. The error names the flag.
func (q Quota) Validate() error {
	if math.IsNaN(q.Rate) || math.IsInf(q.Rate, 0) || (q.Rate < 0 && q.Rate != Unlimited) {
		return fmt.Errorf("%w: --rate %v: give a number of requests per second, 0 for the node's default or unlimited", ErrInvalidQuota, q.Rate)
	}
	if q.ModelWeight < 0 || q.ModelWeight > MaxModelWeight {
		return fmt.Errorf("%w: --model-weight %d: give a weight from 1 to %d (0: 1)", ErrInvalidQuota, q.ModelWeight, MaxModelWeight)
	}
	for _, f := range q.fields() {
		v := int64(0)
		if f.i != nil {
			v = *f.i
		} else {
			v = int64(*f.n)
		}
		if v < 0 && v != Unlimited {
			return fmt.Errorf("%w: --%s %d: limits are not negative (0: the node's default; unlimited: no limit)", ErrInvalidQuota, f.name, v)
		}
	}
	return nil
}

// Resolve returns the quota enforced: each zero field of q takes the
// field of defaults, and Unlimited fields become 0, which enforcement
// reads as no limit.
func (q Quota) Resolve(defaults Quota) Quota {
	out := q
	if out.Rate == 0 {
		out.Rate = defaults.Rate
	}
	if out.Rate < 0 {
		out.Rate = 0
	}
	dfs := defaults.fields()
	for i, f := range out.fields() {
		d := dfs[i]
		if f.i != nil {
			if *f.i == 0 {
				*f.i = *d.i
			}
			if *f.i < 0 {
				*f.i = 0
			}
		} else {
			if *f.n == 0 {
				*f.n = *d.n
			}
			if *f.n < 0 {
				*f.n = 0
			}
		}
	}
	return out
}

// ParseLimit reads a limit as tenant create and the --tenant-default-*
// flags take it: a non-negative number (with size suffixes when size is
// set: 64K, 256MiB, 10G), 0 for the default, or "unlimited" (also "none"),
// which is Unlimited. A negative number is refused.
func ParseLimit(s string, size bool) (int64, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	switch t {
	case "unlimited", "none":
		return Unlimited, nil
	}
	if size {
		return parseSize(t)
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%w: %q is not a count like 100, 0 (the default) or unlimited", ErrInvalidQuota, s)
	}
	return n, nil
}

// ParseRate reads a rate in requests per second: a non-negative number,
// 0 for the default, or "unlimited".
func ParseRate(s string) (float64, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	if t == "unlimited" || t == "none" {
		return Unlimited, nil
	}
	f, err := strconv.ParseFloat(t, 64)
	if err != nil || f < 0 || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, fmt.Errorf("%w: %q is not a rate like 50, 0.5, 0 (the default) or unlimited", ErrInvalidQuota, s)
	}
	return f, nil
}

// parseSize reads a byte count with an optional binary suffix (K, M, G,
// T, with or without "iB"/"B").
func parseSize(s string) (int64, error) {
	t := strings.ToUpper(strings.TrimSpace(s))
	t = strings.TrimSuffix(t, "B")
	t = strings.TrimSuffix(t, "I")
	var shift uint
	for _, u := range []struct {
		suffix string
		shift  uint
	}{{"T", 40}, {"G", 30}, {"M", 20}, {"K", 10}} {
		if strings.HasSuffix(t, u.suffix) {
			shift, t = u.shift, strings.TrimSuffix(t, u.suffix)
			break
		}
	}
	n, err := strconv.ParseInt(strings.TrimSpace(t), 10, 64)
	if err != nil || n < 0 || n > (1<<62)>>shift {
		return 0, fmt.Errorf("%w: %q is not a size like 1048576, 256MiB, 10G, 0 (the default) or unlimited", ErrInvalidQuota, s)
	}
	return n << shift, nil
}

// StoreLimit is the JetStream file storage limit of a tenant's account
// for a resolved quota: Bytes plus an eighth (at least 64 KiB), 0 (no
// limit) without a bytes quota. agentd admits a write only while the
// tenant stays within Bytes; the room above lets the turns it admitted
// write their replies and their ends, so a turn is never cut halfway by
// the server's limit.
func (q Quota) StoreLimit() int64 {
	if q.Bytes <= 0 {
		return 0
	}
	return q.Bytes + max(q.Bytes/8, 64<<10)
}
