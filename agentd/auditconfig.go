package agentd

import (
	"context"
	"flag"
	"time"
)

// AuditFunc receives each command that may change an agent, once
// answered: the request's context (an HTTP request's carries its
// credential's identity, auth.IdentityFrom), the agent, the verb and the
// command's error (nil when it succeeded).
type AuditFunc func(ctx context.Context, agent, verb string, err error)

// Defaults of the audit log's bounds (package agentd/audit).
const (
	DefaultAuditMaxAge = 30 * 24 * time.Hour
	// DefaultAuditMaxBytes caps the audit stream's default size: 1/16 of
	// --js-max-store, at most this.
	DefaultAuditMaxBytes = 256 << 20
)

// AuditBytes is the audit stream's size bound: AuditMaxBytes, or by
// default 1/16 of the node's JetStream store, at most
// DefaultAuditMaxBytes.
func (c Config) AuditBytes() int64 {
	if c.AuditMaxBytes > 0 {
		return c.AuditMaxBytes
	}
	return min(c.JetStreamMaxStore/16, DefaultAuditMaxBytes)
}

// validateAudit refuses negative audit bounds.
func (c *Config) validateAudit() error {
	switch {
	case c.AuditMaxAge < 0:
		return configErrorf("audit-max-age", "--audit-max-age must not be negative")
	case c.AuditMaxBytes < 0:
		return configErrorf("audit-max-bytes", "--audit-max-bytes must not be negative")
	}
	return nil
}

// auditFlags defines --audit-max-age and --audit-max-bytes.
func auditFlags(fs *flag.FlagSet, cfg *Config) {
	fs.DurationVar(&cfg.AuditMaxAge, "audit-max-age", cfg.AuditMaxAge,
		"how long the audit log (with --auth: admin operations, commands that change agents, auth refusals) keeps a record")
	fs.Var((*byteSize)(&cfg.AuditMaxBytes), "audit-max-bytes",
		"`size` the audit log keeps at most, dropping its oldest records (0: 1/16 of --js-max-store, at most 256MiB)")
}
