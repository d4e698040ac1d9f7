package auth

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestAdminToken: a token verifies with the keys that minted it and with
// the same keys derived on another node, not with other keys, not once
// expired, and not with a byte of its claim changed.
func TestAdminToken(t *testing.T) {
	secret := []byte(strings.Repeat("s", 40))
	a, err := DeriveKeys(secret)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := DeriveKeys(secret) // another node of the cluster
	other, _ := DeriveKeys([]byte(strings.Repeat("o", 40)))
	now := time.Unix(1_800_000_000, 0)
	tok, exp, err := a.AdminToken(now, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if !IsAdminToken(tok) || IsAdminToken("fvr_x") || !exp.Equal(now.Add(time.Hour)) {
		t.Fatalf("token %q expires %s", tok, exp)
	}
	if got, err := b.VerifyAdminToken(tok, now.Add(time.Minute)); err != nil || !got.Equal(exp) {
		t.Errorf("verify on another node: %v, %s", err, got)
	}
	tampered := []byte(tok)
	tampered[len(AdminTokenPrefix)+3] ^= 1
	for name, c := range map[string]struct {
		keys *Keys
		tok  string
		at   time.Time
	}{
		"other keys": {other, tok, now},
		"expired":    {a, tok, exp},
		"tampered":   {a, string(tampered), now},
		"garbage":    {a, AdminTokenPrefix + "x.y", now},
		"no dot":     {a, AdminTokenPrefix + "xyz", now},
		"tenant's":   {a, "fvr_abc", now},
	} {
		if _, err := c.keys.VerifyAdminToken(c.tok, c.at); !errors.Is(err, ErrInvalidAdminToken) {
			t.Errorf("%s: got %v, want ErrInvalidAdminToken", name, err)
		}
	}
	for _, ttl := range []time.Duration{-time.Hour, MaxAdminTokenTTL + time.Second} {
		if _, _, err := a.AdminToken(now, ttl); !errors.Is(err, ErrInvalidCredential) {
			t.Errorf("ttl %s: got %v", ttl, err)
		}
	}
	if _, exp, err := a.AdminToken(now, 0); err != nil || !exp.Equal(now.Add(DefaultAdminTokenTTL)) {
		t.Errorf("default ttl: %s, %v", exp, err)
	}
}
