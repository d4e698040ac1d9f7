package main

import (
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"
)

// connectError explains why a client command could not connect to agentd
// at url with opts: a server that wants credentials names the missing
// --creds, one that refused them says so, anything else asks whether
// agentd runs there.
func connectError(url string, opts []nats.Option, err error) error {
	o := nats.GetDefaultOptions()
	for _, opt := range opts {
		_ = opt(&o)
	}
	withCreds := o.UserJWT != nil || o.User != "" || o.Token != "" || o.Nkey != ""
	switch {
	case !isAuthError(err):
		return fmt.Errorf("connect to NATS at %s (is agentd running?): %w", url, err)
	case !withCreds:
		return fmt.Errorf("agentd at %s requires credentials: pass --creds <file> (a tenant's creds, or the admin's <data>/admin.creds) or set FOREVER_CREDS: %w", url, err)
	case errors.Is(err, nats.ErrAuthExpired):
		return fmt.Errorf("agentd at %s refused the credentials: they expired; ask the admin for new ones (agentd tenant token ...): %w", url, err)
	case errors.Is(err, nats.ErrAuthRevoked):
		return fmt.Errorf("agentd at %s refused the credentials: they were revoked: %w", url, err)
	default:
		return fmt.Errorf("agentd at %s refused the credentials given with --creds (or FOREVER_CREDS): check they are this agentd's, not disabled or revoked: %w", url, err)
	}
}

// isAuthError reports whether err is the server refusing the connection's
// credentials, or the lack of them.
func isAuthError(err error) bool {
	return errors.Is(err, nats.ErrAuthorization) || errors.Is(err, nats.ErrAuthExpired) ||
		errors.Is(err, nats.ErrAuthRevoked) || errors.Is(err, nats.ErrAccountAuthExpired)
}
