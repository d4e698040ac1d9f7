package auth

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/nats-io/nkeys"
)

// ErrInvalidName is returned for a tenant name that is not a DNS label.
var ErrInvalidName = errors.New("auth: invalid tenant name")

var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)

// CheckName checks a tenant name: lower-case letters, digits and dashes,
// starting with a letter or digit, at most 63 characters.
func CheckName(name string) error {
	if !nameRE.MatchString(name) {
		return fmt.Errorf("%w %q: use lower-case letters, digits and '-', at most 63, starting with a letter or digit", ErrInvalidName, name)
	}
	return nil
}

// Quota bounds what a tenant may use; a zero field is no limit.
type Quota struct {
	Rate   float64 `json:"rate,omitempty"`   // requests per second
	Burst  int     `json:"burst,omitempty"`  // requests above Rate at once (default max(1, Rate))
	Turns  int     `json:"turns,omitempty"`  // concurrent chat turns
	Agents int     `json:"agents,omitempty"` // agents with state
	Bytes  int64   `json:"bytes,omitempty"`  // bytes stored in JetStream
}

// Tenant is the registry record of one tenant, stored as JSON.
type Tenant struct {
	Name    string           `json:"name"`
	Account string           `json:"account"`           // account public key
	Created time.Time        `json:"created"`           // first creation
	Clients []string         `json:"clients,omitempty"` // client user keys ever minted
	Revoked map[string]int64 `json:"revoked,omitempty"` // user key -> unix seconds of revocation
	Tokens  []string         `json:"tokens,omitempty"`  // SHA-256 (hex) of live HTTP tokens
	Quota   Quota            `json:"quota"`
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

// RevokeAll revokes every client credential and HTTP token of t at now.
func (t *Tenant) RevokeAll(now time.Time) {
	if t.Revoked == nil {
		t.Revoked = make(map[string]int64, len(t.Clients))
	}
	for _, c := range t.Clients {
		t.Revoked[c] = now.Unix()
	}
	t.Tokens = nil
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
