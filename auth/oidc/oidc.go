package oidc

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"github.com/forever-agents/forever/auth"
)

// DefaultTenantClaim is the claim naming the tenant when
// Config.TenantClaim is empty.
const DefaultTenantClaim = "tenant"

// defaultHTTPTimeout bounds each request of the default HTTP client
// (discovery and JWKS fetches): go-oidc fetches keys in the background
// with no deadline of its own, and http.DefaultClient has none.
const defaultHTTPTimeout = 30 * time.Second

// Config configures a Verifier.
type Config struct {
	Issuer      string // issuer URL; discovery at Issuer + "/.well-known/openid-configuration"
	Audience    string // required "aud" value (client id)
	TenantClaim string // claim naming the tenant; default "tenant"
	// RoleClaim, when set, names the claim holding the token's role
	// (reader, approver, writer or admin): a token without it is a
	// reader, one with another value is refused. Empty: every token is a
	// writer.
	RoleClaim  string
	HTTPClient *http.Client // optional, for tests
}

// Claims is what a verified token says.
type Claims struct {
	Tenant   string
	Subject  string
	Role     auth.Role
	IssuedAt time.Time // zero when the token has no "iat"
	Expiry   time.Time
}

// ErrInvalidToken is wrapped by every rejection (bad signature, wrong
// issuer or audience, expired, missing/empty/non-string tenant claim,
// malformed).
var ErrInvalidToken = errors.New("oidc: invalid token")

// Verifier checks bearer tokens of one issuer. It is safe for concurrent
// use.
type Verifier struct {
	v         *oidc.IDTokenVerifier
	claim     string
	roleClaim string
}

// New fetches discovery (bounded by ctx) and returns a Verifier. A missing
// Issuer/Audience is an error.
func New(ctx context.Context, cfg Config) (*Verifier, error) {
	if cfg.Issuer == "" {
		return nil, errors.New("oidc: no issuer")
	}
	if cfg.Audience == "" {
		return nil, errors.New("oidc: no audience")
	}
	claim := cfg.TenantClaim
	if claim == "" {
		claim = DefaultTenantClaim
	}
	client := cfg.HTTPClient
	if client == nil {
		client = &http.Client{Timeout: defaultHTTPTimeout}
	}
	// The provider keeps the client for its key set, which outlives ctx:
	// it fetches the JWKS on demand.
	p, err := oidc.NewProvider(oidc.ClientContext(ctx, client), cfg.Issuer)
	if err != nil {
		return nil, fmt.Errorf("oidc: discovery of issuer %s: %w", cfg.Issuer, err)
	}
	return &Verifier{v: p.Verifier(&oidc.Config{ClientID: cfg.Audience}), claim: claim, roleClaim: cfg.RoleClaim}, nil
}

// Tenant verifies raw (the bearer token, without "Bearer ") and returns the
// tenant it names. Every error wraps ErrInvalidToken and none quotes raw.
// ctx bounds the wait for a JWKS fetch the token triggers.
func (v *Verifier) Tenant(ctx context.Context, raw string) (string, error) {
	c, err := v.Verify(ctx, raw)
	return c.Tenant, err
}

// Verify verifies raw as Tenant does and returns its claims: the tenant,
// the subject, the role (Config.RoleClaim) and when it was issued. Every
// error wraps ErrInvalidToken and none quotes raw.
func (v *Verifier) Verify(ctx context.Context, raw string) (Claims, error) {
	tok, err := v.v.Verify(ctx, raw)
	if err != nil {
		// go-oidc's messages name the check that failed and, once the
		// signature holds, the offending claim; never the token itself.
		return Claims{}, fmt.Errorf("%w: %v", ErrInvalidToken, err)
	}
	var claims map[string]any
	if err := tok.Claims(&claims); err != nil {
		return Claims{}, fmt.Errorf("%w: claims: %v", ErrInvalidToken, err)
	}
	name, ok := claims[v.claim].(string)
	if !ok {
		return Claims{}, fmt.Errorf("%w: no string claim %q", ErrInvalidToken, v.claim)
	}
	if auth.CheckName(name) != nil {
		// The name is not quoted: it may be long or hold control
		// characters.
		return Claims{}, fmt.Errorf("%w: claim %q is not a tenant name (lower-case letters, digits and '-', at most 63, starting with a letter or digit)", ErrInvalidToken, v.claim)
	}
	c := Claims{Tenant: name, Subject: tok.Subject, IssuedAt: tok.IssuedAt, Expiry: tok.Expiry, Role: auth.RoleWriter}
	if v.roleClaim != "" {
		c.Role = auth.RoleReader
		if r, present := claims[v.roleClaim]; present {
			s, _ := r.(string)
			role, err := auth.ParseRole(s)
			if err != nil || s == "" {
				return Claims{}, fmt.Errorf("%w: claim %q is not a role (reader, approver, writer or admin)", ErrInvalidToken, v.roleClaim)
			}
			c.Role = role
		}
	}
	return c, nil
}
