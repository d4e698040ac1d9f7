package tenancy

import (
	"context"
	"time"

	"github.com/forever-agents/forever/agentd"
	"github.com/forever-agents/forever/auth/oidc"
)

// newOIDCVerifier verifies bearer JWTs of Config.OIDCIssuer with the
// auth/oidc package (go-oidc: discovery, the issuer's JWKS, signature, iss,
// aud, exp, and a tenant claim that names a valid tenant).
// Discovery at start is bounded by oidcStartTimeout.
func newOIDCVerifier(ctx context.Context, cfg agentd.Config) (tokenVerifier, error) {
	ctx, cancel := context.WithTimeout(ctx, oidcStartTimeout)
	defer cancel()
	v, err := oidc.New(ctx, oidc.Config{
		Issuer: cfg.OIDCIssuer, Audience: cfg.OIDCAudience, TenantClaim: cfg.OIDCTenantClaim, RoleClaim: cfg.OIDCRoleClaim,
	})
	if err != nil {
		return nil, agentd.ConfigErrorf("oidc-issuer", "oidc issuer %s: %v", cfg.OIDCIssuer, err)
	}
	return v, nil
}

// oidcStartTimeout bounds the issuer's discovery at start.
const oidcStartTimeout = 30 * time.Second
