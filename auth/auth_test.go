package auth

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"
)

func TestLoadKeysCreatesOnceAndKeepsSecretsPrivate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "auth")
	k1, created, err := LoadKeys(dir)
	if err != nil || !created {
		t.Fatalf("first load: created=%v err=%v", created, err)
	}
	k2, created, err := LoadKeys(dir)
	if err != nil || created {
		t.Fatalf("second load: created=%v err=%v", created, err)
	}
	if pub(k1.Operator) != pub(k2.Operator) || pub(k1.Signer) != pub(k2.Signer) {
		t.Fatal("keys changed between loads")
	}
	fi, err := os.Stat(dir)
	if err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("key dir mode %v %v", fi.Mode(), err)
	}
	for _, f := range keyFiles {
		fi, err := os.Stat(filepath.Join(dir, f.name))
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("%s mode %v %v", f.name, fi.Mode(), err)
		}
	}
}

func TestLoadKeysRejectsBadFilesWithoutNamingTheSeed(t *testing.T) {
	dir := t.TempDir()
	if _, _, err := LoadKeys(dir); err != nil {
		t.Fatal(err)
	}
	// A seed of the wrong type: the service key file holds the operator's.
	op, _ := os.ReadFile(filepath.Join(dir, "operator.nk"))
	if err := os.WriteFile(filepath.Join(dir, "service.nk"), op, 0o600); err != nil {
		t.Fatal(err)
	}
	_, _, err := LoadKeys(dir)
	if err == nil || !strings.Contains(err.Error(), "wrong type") || strings.Contains(err.Error(), strings.TrimSpace(string(op))) {
		t.Fatalf("wrong type: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "service.nk"), []byte("SAnotaseed\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, _, err = LoadKeys(dir)
	if err == nil || !strings.Contains(err.Error(), "not an nkey seed") || strings.Contains(err.Error(), "SAnotaseed") {
		t.Fatalf("garbage: %v", err)
	}
}

func TestTenantAccountAndUsers(t *testing.T) {
	k, _, err := LoadKeys(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	tn, err := NewTenant("acme", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	tn.Quota.Bytes = 1 << 20
	client, err := k.TenantClientUser(tn, Credential{Name: "c1", Role: RoleWriter}, tn.Quota)
	if err != nil {
		t.Fatal(err)
	}
	runtime, err := k.TenantRuntimeUser(tn)
	if err != nil {
		t.Fatal(err)
	}
	tn.Clients = append(tn.Clients, client.PublicKey)
	tn.RevokeAll(time.Now())

	tok, err := k.TenantAccountJWT(tn, tn.Quota)
	if err != nil {
		t.Fatal(err)
	}
	ac, err := jwt.DecodeAccountClaims(tok)
	if err != nil {
		t.Fatal(err)
	}
	if ac.Issuer != pub(k.Operator) || ac.Subject != tn.Account || !ac.SigningKeys.Contains(pub(k.Signer)) {
		t.Fatalf("account claims: issuer %s subject %s", ac.Issuer, ac.Subject)
	}
	if ac.Limits.JetStreamLimits.DiskStorage != tn.Quota.StoreLimit() {
		t.Fatalf("disk limit %d", ac.Limits.JetStreamLimits.DiskStorage)
	}
	for _, u := range []*User{client, runtime} {
		uc, err := jwt.DecodeUserClaims(u.JWT)
		if err != nil {
			t.Fatal(err)
		}
		if uc.IssuerAccount != tn.Account || uc.Issuer != pub(k.Signer) {
			t.Fatalf("user %s: issuer %s account %s", uc.Name, uc.Issuer, uc.IssuerAccount)
		}
		revoked := ac.IsClaimRevoked(uc)
		if (u == client) != revoked {
			t.Fatalf("user %s revoked=%v", uc.Name, revoked)
		}
	}
	uc, _ := jwt.DecodeUserClaims(client.JWT)
	allowPub := strings.Join(uc.Permissions.Pub.Allow, " ")
	for _, banned := range []string{"forever.evt", "forever.chunk.", "STREAM.DELETE", "STREAM.PURGE", "KV_", "FOREVER_EVENTS", "forever.admin"} {
		if strings.Contains(allowPub, banned) {
			t.Errorf("client may publish %q: %s", banned, allowPub)
		}
	}
	if got := strings.Join(uc.Permissions.Sub.Allow, " "); got != "forever.chunk.> forever.bcast.> _INBOX.>" {
		t.Errorf("client subscribes %q", got)
	}
	if got := strings.Join(uc.Permissions.Pub.Deny, " "); got != "forever.cmd.*.delete" || !strings.Contains(allowPub, "forever.list") {
		t.Errorf("client may not publish %q, may publish %q: want delete denied and forever.list allowed", got, allowPub)
	}
	creds, err := client.Creds()
	if err != nil || !strings.Contains(string(creds), client.JWT) {
		t.Fatalf("creds: %v", err)
	}
	if tn.Tokens != nil {
		t.Fatal("RevokeAll kept tokens")
	}
}

func TestNamesAndTokens(t *testing.T) {
	for _, ok := range []string{"acme", "a", "team-42", strings.Repeat("a", 63)} {
		if err := CheckName(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "Acme", "-a", "a.b", "a b", "a*", "a>", strings.Repeat("a", 64), "ä"} {
		if err := CheckName(bad); !errors.Is(err, ErrInvalidName) {
			t.Errorf("%q accepted", bad)
		}
	}
	tok, hash, err := NewToken()
	if err != nil || !strings.HasPrefix(tok, "fvr_") || HashToken(tok) != hash || strings.Contains(hash, tok) {
		t.Fatalf("token %q hash %q err %v", tok, hash, err)
	}
	tok2, _, _ := NewToken()
	if tok2 == tok {
		t.Fatal("two tokens alike")
	}
	tn := &Tenant{Tokens: []string{hash}}
	if !tn.HasToken(hash) || tn.HasToken(HashToken(tok2)) {
		t.Fatal("HasToken")
	}
}

func TestDeriveKeys(t *testing.T) {
	secret := []byte(strings.Repeat("s", 40))
	a, err := DeriveKeys(secret)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := DeriveKeys(append([]byte("  "), append(secret, '\n')...))
	c, _ := DeriveKeys([]byte(strings.Repeat("t", 40)))
	for i, f := range keyFiles {
		ka, kb, kc := pub(*f.get(a)), pub(*f.get(b)), pub(*f.get(c))
		if ka != kb || ka == kc {
			t.Errorf("%s: same secret gave %s and %s, another %s", f.name, ka, kb, kc)
		}
		if nkeysPrefix(ka) != f.prefix {
			t.Errorf("%s has the wrong type", f.name)
		}
		for j, g := range keyFiles {
			if i != j && ka == pub(*g.get(a)) {
				t.Errorf("%s and %s are the same key", f.name, g.name)
			}
		}
	}
	if _, err := DeriveKeys([]byte("short")); !errors.Is(err, ErrShortSecret) {
		t.Fatalf("short secret: %v", err)
	}
}

func nkeysPrefix(pub string) nkeys.PrefixByte { return nkeys.Prefix(pub) }

// TestTenantReplierUser: agentd's replier in a tenant's account may
// publish only under InboxPrefix and subscribe to nothing; it is not
// the runtime user (which may publish anywhere there).
func TestTenantReplierUser(t *testing.T) {
	k, _, err := LoadKeys(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	tn, err := NewTenant("acme", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	r, err := k.TenantReplierUser(tn)
	if err != nil {
		t.Fatal(err)
	}
	uc, err := jwt.DecodeUserClaims(r.JWT)
	if err != nil {
		t.Fatal(err)
	}
	if uc.IssuerAccount != tn.Account || uc.Issuer != pub(k.Signer) {
		t.Fatalf("replier: issuer %s account %s", uc.Issuer, uc.IssuerAccount)
	}
	p := uc.Permissions
	if got := strings.Join(p.Pub.Allow, " "); got != InboxPrefix+">" || len(p.Pub.Deny) != 0 {
		t.Errorf("replier publishes %q (deny %q), want only %s>", got, p.Pub.Deny, InboxPrefix)
	}
	if len(p.Sub.Allow) != 0 || strings.Join(p.Sub.Deny, " ") != ">" || p.Resp != nil {
		t.Errorf("replier subscribes %q, deny %q, responses %+v: want none", p.Sub.Allow, p.Sub.Deny, p.Resp)
	}
	rt, err := k.TenantRuntimeUser(tn)
	if err != nil {
		t.Fatal(err)
	}
	if rt.PublicKey == r.PublicKey {
		t.Error("the replier is the runtime user")
	}
}
