package auth

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"regexp"
	"time"

	"github.com/nats-io/nkeys"

	"github.com/forever-agents/forever/internal/apierror"
)

// ErrInvalidName is returned for a tenant name that is not a DNS label.
var ErrInvalidName error = apierror.Declare("auth", apierror.BadRequest, "invalid tenant name")

var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)

// CheckName checks a tenant name: lower-case letters, digits and dashes,
// starting with a letter or digit, at most 63 characters.
func CheckName(name string) error {
	if !nameRE.MatchString(name) {
		return fmt.Errorf("%w %q: use lower-case letters, digits and '-', at most 63, starting with a letter or digit", ErrInvalidName, name)
	}
	return nil
}

// Tenant is the registry record of one tenant, stored as JSON.
type Tenant struct {
	Name    string           `json:"name"`
	Account string           `json:"account"`           // account public key
	Created time.Time        `json:"created"`           // first creation
	Clients []string         `json:"clients,omitempty"` // client user keys ever minted
	Revoked map[string]int64 `json:"revoked,omitempty"` // user key -> unix seconds of revocation
	// Tokens are the SHA-256 (hex) of live HTTP tokens minted before
	// credentials had names: writers, named "legacy".
	Tokens []string `json:"tokens,omitempty"`
	Quota  Quota    `json:"quota"`
	// Budget is the tenant's spend limits (tenant create's budget flags).
	Budget Budget `json:"budget,omitzero"`
	// Creds are the credentials minted, live, expired and revoked.
	Creds []Credential `json:"creds,omitempty"`
	// Disabled refuses the tenant everywhere (its daemon stops, its
	// account takes no connection) until it is enabled again.
	Disabled bool `json:"disabled,omitempty"`
	// Moving is set while the tenant's log moves into its node's shards
	// (agentd tenant move): its daemons are stopped on every node, its
	// account stays open for the move, with room for the copy. A
	// release that does not know the field keeps serving the tenant, and
	// the move waits for (then refuses) its nodes.
	Moving bool `json:"moving,omitempty"`
	// RevokedAt is when every credential was last revoked (unix seconds):
	// an OIDC token issued at or before it is refused.
	RevokedAt int64 `json:"revokedAt,omitempty"`
}

// LegacyCredName names the tokens minted before credentials had names.
const LegacyCredName = "legacy"

// Cred returns the credential named name, nil if there is none.
func (t *Tenant) Cred(name string) *Credential {
	for i := range t.Creds {
		if t.Creds[i].Name == name {
			return &t.Creds[i]
		}
	}
	return nil
}

// TokenCred returns the credential whose token hashes to hash, live or
// not; legacy tokens are writers named LegacyCredName.
func (t *Tenant) TokenCred(hash string) (Credential, bool) {
	for _, c := range t.Creds {
		if c.Token == hash {
			return c, true
		}
	}
	if t.HasToken(hash) {
		return Credential{Name: LegacyCredName, Role: RoleWriter, Token: hash}, true
	}
	return Credential{}, false
}

// RevokeCred revokes the credential named name at now: its user joins the
// account's revocation list, its token is refused. It reports whether it
// was live.
func (t *Tenant) RevokeCred(name string, now time.Time) (bool, error) {
	c := t.Cred(name)
	if c == nil {
		return false, fmt.Errorf("%w: tenant %s has no credential %q", ErrInvalidCredential, t.Name, name)
	}
	if c.Revoked != 0 {
		return false, nil
	}
	c.Revoked = now.Unix()
	if c.User != "" {
		if t.Revoked == nil {
			t.Revoked = make(map[string]int64)
		}
		t.Revoked[c.User] = now.Unix()
	}
	return true, nil
}

// NewTenant creates the record of a new tenant with a fresh account key.
// The account's seed is not kept: users are signed by Keys.Signer.
func NewTenant(name string, now time.Time) (*Tenant, error) {
	if err := CheckName(name); err != nil {
		return nil, err
	}
	akp, err := nkeys.CreateAccount()
	if err != nil {
		return nil, fmt.Errorf("auth: account key: %w", err)
	}
	return &Tenant{Name: name, Account: pub(akp), Created: now.UTC()}, nil
}

// Validate checks what a stored record must have: a valid name and an
// account public key.
func (t *Tenant) Validate() error {
	if err := CheckName(t.Name); err != nil {
		return err
	}
	if !nkeys.IsValidPublicAccountKey(t.Account) {
		return fmt.Errorf("auth: tenant %s: account %q is not an account public key", t.Name, t.Account)
	}
	return nil
}

// HasToken reports whether hash is one of t's live tokens.
func (t *Tenant) HasToken(hash string) bool {
	for _, h := range t.Tokens {
		if h == hash {
			return true
		}
	}
	return false
}

// RevokeAll revokes every client credential and HTTP token of t at now,
// and every OIDC token issued until now. It returns how many were live.
func (t *Tenant) RevokeAll(now time.Time) int {
	if t.Revoked == nil {
		t.Revoked = make(map[string]int64, len(t.Clients))
	}
	n := len(t.Tokens)
	for _, c := range t.Clients {
		if _, ok := t.Revoked[c]; !ok {
			if !t.credUser(c) {
				n++ // a client user minted before credentials had names
			}
			t.Revoked[c] = now.Unix()
		}
	}
	for i := range t.Creds {
		if c := &t.Creds[i]; c.Revoked == 0 {
			if c.Live(now) {
				n++
			}
			c.Revoked = now.Unix()
		}
	}
	t.Tokens = nil
	t.RevokedAt = now.Unix()
	return n
}

// credUser reports whether user is the NATS user of a named credential.
func (t *Tenant) credUser(user string) bool {
	for _, c := range t.Creds {
		if c.User == user {
			return true
		}
	}
	return false
}

// NewToken returns a fresh HTTP bearer token and the hash stored for it.
func NewToken() (token, hash string, err error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", "", fmt.Errorf("auth: token: %w", err)
	}
	token = "fvr_" + base64.RawURLEncoding.EncodeToString(b[:])
	return token, HashToken(token), nil
}

// HashToken is the stored form of an HTTP token.
func HashToken(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

func unixTime(sec int64) time.Time { return time.Unix(sec, 0) }
