package agentd

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"github.com/forever-agents/forever/auth"
)

// DefaultOIDCTenantClaim is the claim that names the tenant of an OIDC
// token when --oidc-tenant-claim is not set.
const DefaultOIDCTenantClaim = "tenant"

// oidcStartTimeout bounds the discovery request at start.
const oidcStartTimeout = 30 * time.Second

// errOIDCToken is wrapped by every refusal of an OIDC token.
var errOIDCToken = errors.New("oidc: invalid token")

// oidcVerifier accepts JWTs of one OIDC issuer as bearer tokens, with
// github.com/coreos/go-oidc: discovery, the issuer's JWKS (cached, fetched
// again when a token names an unknown key, so key rotation needs nothing),
// and the checks of an ID token (signature, iss, aud, exp). The tenant is
// a string claim holding a valid tenant name.
type oidcVerifier struct {
	v     *oidc.IDTokenVerifier
	claim string
}

// newOIDCVerifier fetches the issuer's discovery document.
func newOIDCVerifier(ctx context.Context, cfg Config) (tokenVerifier, error) {
	ctx, cancel := context.WithTimeout(ctx, oidcStartTimeout)
	defer cancel()
	p, err := oidc.NewProvider(ctx, cfg.OIDCIssuer)
	if err != nil {
		return nil, configErrorf("oidc-issuer", "oidc issuer %s: %v", cfg.OIDCIssuer, err)
	}
	claim := cfg.OIDCTenantClaim
	if claim == "" {
		claim = DefaultOIDCTenantClaim
	}
	// The key set outlives ctx: it fetches keys on demand.
	return &oidcVerifier{v: p.Verifier(&oidc.Config{ClientID: cfg.OIDCAudience}), claim: claim}, nil
}

// Tenant verifies raw and returns the tenant it names. Errors wrap
// errOIDCToken and never quote the token.
func (o *oidcVerifier) Tenant(ctx context.Context, raw string) (string, error) {
	tok, err := o.v.Verify(ctx, raw)
	if err != nil {
		return "", fmt.Errorf("%w: %v", errOIDCToken, err)
	}
	var claims map[string]any
	if err := tok.Claims(&claims); err != nil {
		return "", fmt.Errorf("%w: claims: %v", errOIDCToken, err)
	}
	name, ok := claims[o.claim].(string)
	if !ok {
		return "", fmt.Errorf("%w: no string claim %q", errOIDCToken, o.claim)
	}
	if err := auth.CheckName(name); err != nil {
		return "", fmt.Errorf("%w: claim %q: %v", errOIDCToken, o.claim, err)
	}
	return name, nil
}
