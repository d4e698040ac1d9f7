package agentd

import (
	"flag"
	"strconv"

	"github.com/forever-agents/forever/auth"
)

// Built-in defaults of a tenant's quota (Config.TenantDefaults), so that
// no tenant created without quotas can take what its peers and agentd's
// own partition leases need. Bytes and Memory are fractions of the
// node's JetStream limits.
const (
	DefaultTenantRate      = 100
	DefaultTenantTurns     = 100
	DefaultTenantAgents    = 10000
	DefaultTenantConns     = 32
	DefaultTenantSubs      = 256
	DefaultTenantPayload   = 1 << 20
	DefaultTenantStreams   = 16
	DefaultTenantConsumers = 256
	// DefaultTenantStoreShare is the share of --js-max-store (and of
	// --js-max-memory) a tenant may use by default: 1/8.
	DefaultTenantStoreShare = 8
)

// validateTenantDefaults refuses negative defaults (other than
// unlimited).
func (c *Config) validateTenantDefaults() error {
	if err := c.TenantDefaults.Validate(); err != nil {
		return configErrorf("tenant-default-quota", "%v", err)
	}
	return nil
}

// TenantQuota is the quota enforced for a tenant whose record holds q:
// q's zero fields take TenantDefaults (bytes and memory, when those are
// zero too, 1/DefaultTenantStoreShare of the node's JetStream limits), its
// unlimited fields become 0 (no limit).
func (c Config) TenantQuota(q auth.Quota) auth.Quota {
	d := c.TenantDefaults
	if d.Bytes == 0 {
		d.Bytes = c.JetStreamMaxStore / DefaultTenantStoreShare
	}
	if d.Memory == 0 {
		d.Memory = c.JetStreamMaxMemory / DefaultTenantStoreShare
	}
	return q.Resolve(d.Resolve(auth.Quota{}))
}

// limitValue is a flag.Value for a quota limit: a count (or a size), 0 for
// the built-in default, or "unlimited".
type limitValue struct {
	p    *int64
	n    *int
	size bool
}

func (l limitValue) String() string {
	var v int64
	switch {
	case l.p != nil:
		v = *l.p
	case l.n != nil:
		v = int64(*l.n)
	}
	if v == auth.Unlimited {
		return "unlimited"
	}
	if l.size {
		b := byteSize(v)
		return b.String()
	}
	return strconv.FormatInt(v, 10)
}

func (l limitValue) Set(s string) error {
	v, err := auth.ParseLimit(s, l.size)
	if err != nil {
		return err
	}
	if l.p != nil {
		*l.p = v
	} else {
		*l.n = int(v)
	}
	return nil
}

// rateValue is a flag.Value for a rate: a number, 0 for the default, or
// "unlimited".
type rateValue struct{ p *float64 }

func (r rateValue) String() string {
	if r.p == nil {
		return "0"
	}
	if *r.p == auth.Unlimited {
		return "unlimited"
	}
	return strconv.FormatFloat(*r.p, 'g', -1, 64)
}

func (r rateValue) Set(s string) error {
	v, err := auth.ParseRate(s)
	if err == nil {
		*r.p = v
	}
	return err
}

// tenantDefaultFlags defines the --tenant-default-* flags.
func tenantDefaultFlags(fs *flag.FlagSet, cfg *Config) {
	d := &cfg.TenantDefaults
	const head, tail = "default quota of a tenant created without its own: ", " (0: the built-in default; unlimited: no limit)"
	fs.Var(rateValue{&d.Rate}, "tenant-default-rate", head+"`requests` per second (NATS commands, HTTP requests, JetStream API calls)"+tail)
	fs.Var(limitValue{n: &d.Burst}, "tenant-default-burst", head+"`requests` above the rate at once (built-in: the rate)"+tail)
	fs.Var(limitValue{n: &d.Turns}, "tenant-default-max-turns", head+"chat `turns` running at once"+tail)
	fs.Var(limitValue{n: &d.Agents}, "tenant-default-max-agents", head+"`agents` with state"+tail)
	fs.Var(limitValue{p: &d.Bytes, size: true}, "tenant-default-max-bytes", head+"JetStream file storage (`size`; built-in: 1/8 of --js-max-store)"+tail)
	fs.Var(limitValue{p: &d.Memory, size: true}, "tenant-default-max-memory", head+"JetStream memory storage (`size`; built-in: 1/8 of --js-max-memory)"+tail)
	fs.Var(limitValue{p: &d.Conns}, "tenant-default-max-conns", head+"NATS `connections` of its account, agentd's own (two a node) included"+tail)
	fs.Var(limitValue{p: &d.Subs}, "tenant-default-max-subs", head+"`subscriptions` of each client connection"+tail)
	fs.Var(limitValue{p: &d.Payload, size: true}, "tenant-default-max-payload", head+"largest message a client publishes (`size`)"+tail)
	fs.Var(limitValue{p: &d.Streams}, "tenant-default-max-streams", head+"JetStream `streams` of its account, agentd's own included"+tail)
	fs.Var(limitValue{p: &d.Consumers}, "tenant-default-max-consumers", head+"JetStream `consumers` of its account, agentd's own (views, stream followers) included"+tail)
}
