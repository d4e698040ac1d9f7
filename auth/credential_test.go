package auth

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
)

func TestParseRole(t *testing.T) {
	for in, want := range map[string]Role{"": RoleWriter, "reader": RoleReader, " Approver ": RoleApprover, "WRITER": RoleWriter, "admin": RoleAdmin} {
		if got, err := ParseRole(in); err != nil || got != want {
			t.Errorf("ParseRole(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"root", "read", "writer,admin", "*"} {
		if _, err := ParseRole(bad); !errors.Is(err, ErrInvalidCredential) {
			t.Errorf("ParseRole(%q) accepted", bad)
		}
	}
}

func TestParseExpiry(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"": 0, "never": 0, "0": 0, "720h": 720 * time.Hour, "30d": 30 * 24 * time.Hour, "2w": 14 * 24 * time.Hour, "90m": 90 * time.Minute,
	} {
		if got, err := ParseExpiry(in); err != nil || got != want {
			t.Errorf("ParseExpiry(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"-1h", "500ms", "soon", "d", "1y", "99999999d", "4000w", "1.5d", "1e9h"} {
		if _, err := ParseExpiry(bad); !errors.Is(err, ErrInvalidCredential) {
			t.Errorf("ParseExpiry(%q) accepted", bad)
		}
	}
}

func TestParseLimitAndValidate(t *testing.T) {
	for _, tc := range []struct {
		in   string
		size bool
		want int64
	}{{"0", false, 0}, {"32", false, 32}, {"unlimited", false, Unlimited}, {"none", true, Unlimited}, {"256MiB", true, 256 << 20}, {"1G", true, 1 << 30}} {
		if got, err := ParseLimit(tc.in, tc.size); err != nil || got != tc.want {
			t.Errorf("ParseLimit(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []string{"-1", "-5", "lots", "1.5"} {
		if _, err := ParseLimit(bad, false); !errors.Is(err, ErrInvalidQuota) {
			t.Errorf("ParseLimit(%q) accepted", bad)
		}
	}
	if _, err := ParseRate("-2"); !errors.Is(err, ErrInvalidQuota) {
		t.Error("a negative rate was accepted")
	}
	for _, q := range []Quota{{Bytes: -5}, {Turns: -2}, {Rate: -0.5}, {Consumers: -100}} {
		if err := q.Validate(); !errors.Is(err, ErrInvalidQuota) || !strings.Contains(err.Error(), "--") {
			t.Errorf("%+v: %v", q, err)
		}
	}
	if err := (Quota{Bytes: Unlimited, Rate: Unlimited, Conns: 3}).Validate(); err != nil {
		t.Error(err)
	}
	got := Quota{Bytes: Unlimited, Conns: 3}.Resolve(Quota{Rate: 100, Bytes: 1 << 20, Conns: 32, Consumers: 256})
	if got.Bytes != 0 || got.Conns != 3 || got.Consumers != 256 || got.Rate != 100 {
		t.Errorf("resolved %+v", got)
	}
}

// TestRolePermissions: a reader's creds may publish only the read verbs,
// an approver's also approve, a writer's and an admin's every verb; every
// role replays chunks.
func TestRolePermissions(t *testing.T) {
	for _, tc := range []struct {
		role  Role
		allow []string
		deny  []string
	}{
		{RoleReader, []string{"forever.cmd.*.messages", "forever.cmd.*.status"}, []string{"forever.cmd.>", "forever.cmd.*.chat", "forever.cmd.*.approve", "forever.cmd.*.state"}},
		{RoleApprover, []string{"forever.cmd.*.messages", "forever.cmd.*.approve"}, []string{"forever.cmd.>", "forever.cmd.*.chat", "forever.cmd.*.tool-result"}},
		{RoleWriter, []string{"forever.cmd.>"}, nil},
		{RoleAdmin, []string{"forever.cmd.>"}, nil},
	} {
		p := ClientPermissions(tc.role)
		for _, s := range tc.allow {
			if !p.Pub.Allow.Contains(s) {
				t.Errorf("%s may not publish %s", tc.role, s)
			}
		}
		for _, s := range tc.deny {
			if p.Pub.Allow.Contains(s) {
				t.Errorf("%s may publish %s", tc.role, s)
			}
		}
		if !p.Pub.Allow.Contains(ClientAPIPrefix+".CONSUMER.CREATE.*.>") || !p.Sub.Allow.Contains("forever.chunk.>") {
			t.Errorf("%s cannot replay chunks", tc.role)
		}
		if strings.Contains(strings.Join(p.Pub.Allow, " "), "$JS.API") {
			t.Errorf("%s reaches $JS.API itself: %v", tc.role, p.Pub.Allow)
		}
		if tc.role.Allows("chat") != tc.role.AtLeast(RoleWriter) || !tc.role.Allows("messages") ||
			tc.role.Allows("approve") != tc.role.AtLeast(RoleApprover) || tc.role.Allows("state") != tc.role.AtLeast(RoleWriter) {
			t.Errorf("%s: Allows is wrong", tc.role)
		}
	}
	if Role("root").Allows("status") || Role("").AtLeast(RoleReader) {
		t.Error("an unknown role is allowed something")
	}
}

// TestCredentialClaims: a credential's user carries its expiry, its
// connection limits and its role's permissions; revoking it puts it in
// the account's revocation list; a disabled tenant's account takes no
// connection; the account carries the resolved limits.
func TestCredentialClaims(t *testing.T) {
	k, _, err := LoadKeys(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	tn, _ := NewTenant("acme", time.Now())
	exp := time.Now().Add(time.Hour).Unix()
	q := Quota{Subs: 100, Payload: 4096, Conns: 8, Streams: 10, Consumers: 50, Bytes: 1 << 20, Memory: 1 << 16}
	c := Credential{Name: "ro", Role: RoleReader, Created: time.Now().Unix(), Expires: exp}
	u, err := k.TenantClientUser(tn, c, q)
	if err != nil {
		t.Fatal(err)
	}
	c.User = u.PublicKey
	tn.Creds = append(tn.Creds, c)
	tn.Clients = append(tn.Clients, u.PublicKey)
	uc, _ := jwt.DecodeUserClaims(u.JWT)
	if uc.Expires != exp || uc.Limits.Subs != 100 || uc.Limits.Payload != 4096 || uc.Permissions.Pub.Allow.Contains("forever.cmd.>") || uc.Name != "acme/ro" {
		t.Fatalf("user claims %+v", uc)
	}
	tok, _ := k.TenantAccountJWT(tn, q)
	ac, _ := jwt.DecodeAccountClaims(tok)
	js := ac.Limits.JetStreamLimits
	if ac.Limits.Conn != 8 || js.Streams != 10 || js.Consumer != 50 || js.DiskStorage != 1<<20+128<<10 || js.MemoryStorage != 1<<16 || ac.IsClaimRevoked(uc) {
		t.Fatalf("account limits %+v %+v", ac.Limits, js)
	}
	if live, err := tn.RevokeCred("ro", time.Now()); !live || err != nil {
		t.Fatal(live, err)
	}
	if _, err := tn.RevokeCred("nope", time.Now()); !errors.Is(err, ErrInvalidCredential) {
		t.Fatal(err)
	}
	tn.Disabled = true
	tok, _ = k.TenantAccountJWT(tn, Quota{})
	ac, _ = jwt.DecodeAccountClaims(tok)
	if !ac.IsClaimRevoked(uc) || ac.Limits.Conn != 0 || ac.Limits.JetStreamLimits.DiskStorage != jwt.NoLimit {
		t.Fatalf("after revoke and disable: revoked=%v conn=%d", ac.IsClaimRevoked(uc), ac.Limits.Conn)
	}
	if (&Credential{Expires: time.Now().Add(-time.Second).Unix()}).Live(time.Now()) {
		t.Fatal("an expired credential is live")
	}
}

func FuzzParseRole(f *testing.F) {
	for _, s := range []string{"", "reader", "Admin", " writer\n", "root", "\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseRole(s)
		if err != nil {
			if !errors.Is(err, ErrInvalidCredential) || strings.Contains(err.Error(), "\n") && len(s) < 40 && !strings.Contains(s, "\n") {
				t.Fatalf("error %v", err)
			}
			return
		}
		if !r.Valid() {
			t.Fatalf("ParseRole(%q) = %q, not a role", s, r)
		}
	})
}

func FuzzParseExpiry(f *testing.F) {
	for _, s := range []string{"", "720h", "30d", "2w", "never", "-1h", "1e9h", "9223372036854775807d", "0.5h"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := ParseExpiry(s)
		if err != nil {
			if !errors.Is(err, ErrInvalidCredential) {
				t.Fatalf("error %v", err)
			}
			return
		}
		if d != 0 && (d < time.Second || d > MaxExpiry) {
			t.Fatalf("ParseExpiry(%q) = %v, out of bounds", s, d)
		}
	})
}

func FuzzParseLimit(f *testing.F) {
	for _, s := range []string{"0", "32", "unlimited", "-1", "256MiB", "9223372036854775807T", " 1k "} {
		f.Add(s, true)
		f.Add(s, false)
	}
	f.Fuzz(func(t *testing.T, s string, size bool) {
		n, err := ParseLimit(s, size)
		if err != nil {
			if !errors.Is(err, ErrInvalidQuota) {
				t.Fatalf("error %v", err)
			}
			return
		}
		if n < 0 && n != Unlimited {
			t.Fatalf("ParseLimit(%q) = %d", s, n)
		}
		if err := (Quota{Bytes: n, Conns: n}).Validate(); err != nil {
			t.Fatalf("a parsed limit does not validate: %v", err)
		}
	})
}
