package auth

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// An actor token names who sends a command over NATS where the server
// cannot say: the admin reaches a tenant's agents (agentd delete --tenant)
// through a credential of agentd's own user in the tenant's account
// (agentd's admin service grants it), so without it the audit log would
// name that user, not the admin. The admin service mints one with each
// grant, for that tenant, and the command carries it in HeaderActor; the
// tenant's daemon verifies it and audits the command as its Cred. It is a
// claim {tenant, cred, exp} signed by the service account's key, with a
// context of its own, so that it is never valid as an admin token.
const (
	// ActorTokenPrefix starts every actor token.
	ActorTokenPrefix = "fvrx_"
	// HeaderActor carries an actor token on a NATS command.
	HeaderActor = "Forever-Actor"
	// ActorTokenTTL is how long an actor token lives.
	ActorTokenTTL = 15 * time.Minute
)

// actorContext is signed before an actor claim: a signature over it
// never verifies as an admin token's, nor an admin token's as one.
const actorContext = "forever-actor\x00"

// ErrInvalidActorToken is returned by VerifyActorToken for a token these
// keys did not sign, one for another tenant, or one that expired.
var ErrInvalidActorToken = errors.New("auth: invalid actor token")

type actorClaim struct {
	Tenant  string `json:"tenant"`
	Cred    string `json:"cred"`
	Expires int64  `json:"exp"`
}

// ActorToken mints an actor token saying cred acts on tenant, valid for
// ActorTokenTTL from now.
func (k *Keys) ActorToken(tenant, cred string, now time.Time) (string, error) {
	claim, err := json.Marshal(actorClaim{Tenant: tenant, Cred: cred, Expires: now.Add(ActorTokenTTL).Unix()})
	if err != nil {
		return "", err
	}
	sig, err := k.Service.Sign(append([]byte(actorContext), claim...))
	if err != nil {
		return "", fmt.Errorf("auth: actor token: %w", err)
	}
	enc := base64.RawURLEncoding
	return ActorTokenPrefix + enc.EncodeToString(claim) + "." + enc.EncodeToString(sig), nil
}

// VerifyActorToken checks that tok was minted with these keys for tenant
// and has not expired at now, and returns the credential it names.
// Errors wrap ErrInvalidActorToken and name nothing of the token.
func (k *Keys) VerifyActorToken(tok, tenant string, now time.Time) (cred string, err error) {
	body, ok := strings.CutPrefix(tok, ActorTokenPrefix)
	claimB64, sigB64, ok2 := strings.Cut(body, ".")
	if !ok || !ok2 {
		return "", fmt.Errorf("%w: not an actor token", ErrInvalidActorToken)
	}
	enc := base64.RawURLEncoding
	claim, err1 := enc.DecodeString(claimB64)
	sig, err2 := enc.DecodeString(sigB64)
	if err1 != nil || err2 != nil || k.Service.Verify(append([]byte(actorContext), claim...), sig) != nil {
		return "", fmt.Errorf("%w: not signed by this cluster's keys", ErrInvalidActorToken)
	}
	var c actorClaim
	if err := json.Unmarshal(claim, &c); err != nil || c.Expires == 0 || c.Cred == "" {
		return "", fmt.Errorf("%w: unreadable claim", ErrInvalidActorToken)
	}
	if c.Tenant != tenant {
		return "", fmt.Errorf("%w: minted for another tenant", ErrInvalidActorToken)
	}
	if !now.Before(time.Unix(c.Expires, 0)) {
		return "", fmt.Errorf("%w: expired", ErrInvalidActorToken)
	}
	return c.Cred, nil
}
