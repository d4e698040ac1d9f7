package auth

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// The admin's HTTP token: the operator's admin reaches every tenant over
// HTTP (the console, GET /v1/tenants) with it, as admin.creds reaches the
// admin service over NATS. It is minted from the operator's keys, like
// admin.creds, by whoever holds them (agentd auth admin-token) or by the
// admin credential over NATS (the admin service), and verified by every
// node holding the same keys (a cluster shares them through
// --auth-secret-file), with no state: it is a claim {iat, exp, jti}
// signed by the service account's key. It cannot be revoked one by one;
// it expires (DefaultAdminTokenTTL, at most MaxAdminTokenTTL), and
// changing the operator's keys revokes every one.
const (
	// AdminTokenPrefix starts every admin token ("fvr_" starts tenants').
	AdminTokenPrefix = "fvra_"
	// DefaultAdminTokenTTL is how long an admin token lives by default.
	DefaultAdminTokenTTL = 12 * time.Hour
	// MaxAdminTokenTTL bounds it.
	MaxAdminTokenTTL = 7 * 24 * time.Hour
)

// ErrInvalidAdminToken is returned by VerifyAdminToken for a token these
// keys did not sign, or one that expired.
var ErrInvalidAdminToken = errors.New("auth: invalid admin token")

// adminClaim is what an admin token says, signed.
type adminClaim struct {
	Issued  int64  `json:"iat"`
	Expires int64  `json:"exp"`
	ID      string `json:"jti"`
}

// IsAdminToken reports whether tok has the admin token's form (not
// whether it is valid).
func IsAdminToken(tok string) bool { return strings.HasPrefix(tok, AdminTokenPrefix) }

// AdminToken mints an admin token issued at now that expires after ttl
// (0: DefaultAdminTokenTTL; more than MaxAdminTokenTTL or negative:
// ErrInvalidCredential).
func (k *Keys) AdminToken(now time.Time, ttl time.Duration) (token string, expires time.Time, err error) {
	if ttl == 0 {
		ttl = DefaultAdminTokenTTL
	}
	if ttl < time.Second || ttl > MaxAdminTokenTTL {
		return "", time.Time{}, fmt.Errorf("%w: an admin token lives from 1s to %s, not %s", ErrInvalidCredential, MaxAdminTokenTTL, ttl)
	}
	var id [12]byte
	if _, err := rand.Read(id[:]); err != nil {
		return "", time.Time{}, fmt.Errorf("auth: admin token: %w", err)
	}
	expires = now.Add(ttl).Truncate(time.Second)
	claim, err := json.Marshal(adminClaim{Issued: now.Unix(), Expires: expires.Unix(), ID: hex.EncodeToString(id[:])})
	if err != nil {
		return "", time.Time{}, err
	}
	sig, err := k.Service.Sign(claim)
	if err != nil {
		return "", time.Time{}, fmt.Errorf("auth: admin token: %w", err)
	}
	enc := base64.RawURLEncoding
	return AdminTokenPrefix + enc.EncodeToString(claim) + "." + enc.EncodeToString(sig), expires, nil
}

// VerifyAdminToken checks that tok was minted with these keys and has not
// expired at now, and returns when it expires. Errors wrap
// ErrInvalidAdminToken and name nothing of the token.
func (k *Keys) VerifyAdminToken(tok string, now time.Time) (expires time.Time, err error) {
	body, ok := strings.CutPrefix(tok, AdminTokenPrefix)
	claimB64, sigB64, ok2 := strings.Cut(body, ".")
	if !ok || !ok2 {
		return time.Time{}, fmt.Errorf("%w: not an admin token", ErrInvalidAdminToken)
	}
	enc := base64.RawURLEncoding
	claim, err1 := enc.DecodeString(claimB64)
	sig, err2 := enc.DecodeString(sigB64)
	if err1 != nil || err2 != nil || k.Service.Verify(claim, sig) != nil {
		return time.Time{}, fmt.Errorf("%w: not signed by this cluster's keys", ErrInvalidAdminToken)
	}
	var c adminClaim
	if err := json.Unmarshal(claim, &c); err != nil || c.Expires == 0 {
		return time.Time{}, fmt.Errorf("%w: unreadable claim", ErrInvalidAdminToken)
	}
	expires = time.Unix(c.Expires, 0)
	if !now.Before(expires) {
		return expires, fmt.Errorf("%w: expired at %s", ErrInvalidAdminToken, expires.UTC().Format(time.RFC3339))
	}
	return expires, nil
}
