package auth

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/forever-agents/forever/internal/apierror"
)

// Role scopes a credential: what its holder may do with the tenant's
// agents. Each role may do what the ones before it may.
type Role string

// Roles, from the least to the most.
const (
	// RoleReader reads: status, fibers, schedules, messages, the log,
	// approvals waiting, streams and usage, the cluster, and follows
	// streams (SSE, WebSocket, replay). It starts nothing and changes
	// nothing.
	RoleReader Role = "reader"
	// RoleApprover also answers approvals (the approve command, or an AI
	// SDK body that answers approvals only).
	RoleApprover Role = "approver"
	// RoleWriter also starts turns and changes agents: chat, cancel
	// (stop), interrupt, state, tool-result. The default.
	RoleWriter Role = "writer"
	// RoleAdmin also reaches the tenant's diagnostic endpoints
	// (/debug/quarantine).
	RoleAdmin Role = "admin"
)

// DefaultRole is the role of a credential minted without one.
const DefaultRole = RoleWriter

// Roles are the roles in order.
var Roles = []Role{RoleReader, RoleApprover, RoleWriter, RoleAdmin}

// ErrInvalidCredential is returned for a role, expiry or credential name
// that cannot be read.
var ErrInvalidCredential error = apierror.Declare("auth", apierror.BadRequest, "invalid credential")

// ParseRole reads a role: reader, approver, writer or admin (case
// insensitive); empty is DefaultRole.
func ParseRole(s string) (Role, error) {
	t := Role(strings.ToLower(strings.TrimSpace(s)))
	if t == "" {
		return DefaultRole, nil
	}
	if !slices.Contains(Roles, t) {
		return "", fmt.Errorf("%w: role %q is not reader, approver, writer or admin", ErrInvalidCredential, truncate(s))
	}
	return t, nil
}

// Valid reports whether r is one of Roles.
func (r Role) Valid() bool { return slices.Contains(Roles, r) }

// rank orders the roles; an unknown role ranks below reader.
func (r Role) rank() int { return slices.Index(Roles, r) }

// AtLeast reports whether r may do what min may.
func (r Role) AtLeast(min Role) bool { return r.Valid() && r.rank() >= min.rank() }

// readVerbs and approveVerbs are the command verbs a reader and an
// approver may send (forever.cmd.<agent>.<verb>), from the verb table
// (VerbAccess).
var (
	readVerbs    = VerbsOf(AccessRead)
	approveVerbs = VerbsOf(AccessApprove)
)

// Verbs returns the command verbs r may send, nil for every verb.
func (r Role) Verbs() []string {
	switch {
	case r.AtLeast(RoleWriter):
		return nil
	case r == RoleApprover:
		return append(slices.Clone(readVerbs), approveVerbs...)
	case r == RoleReader:
		return slices.Clone(readVerbs)
	}
	return []string{}
}

// Allows reports whether r may send the command verb.
func (r Role) Allows(verb string) bool {
	if slices.Contains(AdminVerbs, verb) {
		return r.AtLeast(RoleAdmin)
	}
	vs := r.Verbs()
	return vs == nil && r.Valid() || slices.Contains(vs, verb)
}

// MaxExpiry bounds --expires.
const MaxExpiry = 10 * 365 * 24 * time.Hour

// ParseExpiry reads how long a credential lives: a Go duration ("720h",
// "90m") or a number of days or weeks ("30d", "2w"); "0", "never" or empty
// is no expiry (0). It must be at least a second (JWTs count in seconds)
// and at most MaxExpiry.
func ParseExpiry(s string) (time.Duration, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	switch t {
	case "", "0", "never":
		return 0, nil
	}
	bad := fmt.Errorf("%w: expiry %q is not a duration like 720h, 30d or 2w (or never)", ErrInvalidCredential, truncate(s))
	var d time.Duration
	if n, unit := t[:len(t)-1], t[len(t)-1]; unit == 'd' || unit == 'w' {
		v, err := strconv.ParseInt(n, 10, 64)
		if err != nil || v <= 0 || v > int64(MaxExpiry/(24*time.Hour)) {
			return 0, bad
		}
		d = time.Duration(v) * 24 * time.Hour
		if unit == 'w' {
			if v > int64(MaxExpiry/(7*24*time.Hour)) {
				return 0, bad
			}
			d *= 7
		}
	} else {
		var err error
		if d, err = time.ParseDuration(t); err != nil {
			return 0, bad
		}
	}
	if d < time.Second || d > MaxExpiry {
		return 0, fmt.Errorf("%w: expiry %s is not between a second and 10 years", ErrInvalidCredential, d)
	}
	return d, nil
}

// truncate shortens what an error quotes of its input.
func truncate(s string) string {
	if len(s) > 40 {
		return s[:40] + "..."
	}
	return s
}

// CheckCredName checks a credential name: as a tenant name, lower-case
// letters, digits and dashes, at most 63.
func CheckCredName(name string) error {
	if !nameRE.MatchString(name) {
		return fmt.Errorf("%w: credential name %q: use lower-case letters, digits and '-', at most 63, starting with a letter or digit", ErrInvalidCredential, truncate(name))
	}
	return nil
}

// Credential is one credential of a tenant, minted by tenant create: a
// NATS user (its creds file) and an HTTP token, with one name, role and
// expiry. Revoking it revokes both.
type Credential struct {
	Name    string `json:"name"`
	Role    Role   `json:"role"`
	User    string `json:"user,omitempty"`    // public key of its NATS user
	Token   string `json:"token,omitempty"`   // SHA-256 (hex) of its HTTP token
	Created int64  `json:"created"`           // unix seconds
	Expires int64  `json:"expires,omitempty"` // unix seconds; 0: never
	Revoked int64  `json:"revoked,omitempty"` // unix seconds; 0: live
}

// Live reports whether c is neither revoked nor expired at now.
func (c *Credential) Live(now time.Time) bool {
	return c.Revoked == 0 && (c.Expires == 0 || now.Unix() < c.Expires)
}

// Identity is who makes a request: the tenant, the credential's name and
// role, and where it came from. The HTTP front door puts it in the
// request's context; commands check the role against their verb.
type Identity struct {
	Tenant string `json:"tenant"`
	Cred   string `json:"cred"` // credential name; "oidc:<subject>" for an OIDC token
	Role   Role   `json:"role"`
	From   string `json:"from,omitempty"` // the client's address
}

type identityKey struct{}

// WithIdentity returns ctx carrying id.
func WithIdentity(ctx context.Context, id Identity) context.Context {
	return context.WithValue(ctx, identityKey{}, id)
}

// IdentityFrom returns the identity ctx carries; ok is false for a
// request that came without one (a NATS command, whose role the server
// enforced through its credential's permissions).
func IdentityFrom(ctx context.Context) (Identity, bool) {
	id, ok := ctx.Value(identityKey{}).(Identity)
	return id, ok
}
