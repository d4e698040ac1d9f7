package auth

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestActorToken: an actor token verifies, on any node with the same
// keys, for its tenant until it expires; not for another tenant, with
// other keys, tampered, nor as an admin token (and an admin token's
// claim and signature never verify as an actor token).
func TestActorToken(t *testing.T) {
	secret := []byte(strings.Repeat("s", 40))
	a, err := DeriveKeys(secret)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := DeriveKeys(secret)
	other, _ := DeriveKeys([]byte(strings.Repeat("o", 40)))
	now := time.Unix(1_800_000_000, 0)
	tok, err := a.ActorToken("acme", "admin", now)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := b.VerifyActorToken(tok, "acme", now.Add(time.Minute)); err != nil || got != "admin" {
		t.Fatalf("verify on another node: %q, %v", got, err)
	}
	tampered := []byte(tok)
	tampered[len(ActorTokenPrefix)+3] ^= 1
	admin, _, err := a.AdminToken(now, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		keys   *Keys
		tok    string
		tenant string
		at     time.Time
	}{
		{"other tenant", a, tok, "other", now},
		{"other keys", other, tok, "acme", now},
		{"expired", a, tok, "acme", now.Add(ActorTokenTTL)},
		{"tampered", a, string(tampered), "acme", now},
		{"admin token", a, ActorTokenPrefix + strings.TrimPrefix(admin, AdminTokenPrefix), "acme", now},
		{"empty", a, "", "acme", now},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, err := c.keys.VerifyActorToken(c.tok, c.tenant, c.at); !errors.Is(err, ErrInvalidActorToken) {
				t.Errorf("err = %v, want ErrInvalidActorToken", err)
			}
		})
	}
	if _, err := a.VerifyAdminToken(AdminTokenPrefix+strings.TrimPrefix(tok, ActorTokenPrefix), now); err == nil {
		t.Error("an actor token verified as an admin token")
	}
}
