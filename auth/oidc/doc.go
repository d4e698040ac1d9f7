// Package oidc accepts OIDC JWT bearer tokens of one issuer and returns the
// tenant they name, with github.com/coreos/go-oidc/v3 doing discovery, the
// signature check against the issuer's JWKS and the ID token claim checks.
//
// Invariants (each tested in this package):
//   - A token is accepted only if its signature verifies against a key of
//     the issuer's JWKS (an unsigned "none" token, a token signed with any
//     other key, or a malformed string is refused), its "iss" is the
//     configured issuer, its "aud" contains the configured audience, it is
//     not expired (a token without "exp" counts as expired), and it names
//     a tenant: the tenant claim (Config.TenantClaim, default "tenant") is
//     a string matching ^[a-z0-9][a-z0-9-]{0,62}$.
//   - Every refusal wraps ErrInvalidToken, and no error quotes the token.
//   - Verify returns the token's role: writer when Config.RoleClaim is not
//     set; with it, the claim's role, reader when the claim is absent, and
//     a refusal when it holds anything but reader, approver, writer or
//     admin. It also returns "iat", which tenant revocation compares.
//   - The JWKS URL comes from the issuer's discovery document
//     (Issuer + "/.well-known/openid-configuration"), fetched once by New.
//     go-oidc caches the key set and fetches it again when a token names a
//     key it does not hold, so the issuer may rotate keys with no restart.
package oidc
