package main

import (
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"github.com/forever-agents/forever/agentd"
	"github.com/forever-agents/forever/agentd/agentdtest"
)

// testIssuer is an OIDC issuer: discovery and a JWKS over HTTP, tokens
// signed with its current key.
type testIssuer struct {
	srv *httptest.Server
	mu  sync.Mutex
	key *rsa.PrivateKey
	kid string
}

func newTestIssuer(t *testing.T) *testIssuer {
	t.Helper()
	is := &testIssuer{}
	is.rotate(t, "k1")
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/openid-configuration", func(w http.ResponseWriter, _ *http.Request) {
		json.NewEncoder(w).Encode(map[string]any{
			"issuer": is.srv.URL, "jwks_uri": is.srv.URL + "/jwks",
			"authorization_endpoint": is.srv.URL + "/auth", "token_endpoint": is.srv.URL + "/token",
			"id_token_signing_alg_values_supported": []string{"RS256"},
		})
	})
	mux.HandleFunc("GET /jwks", func(w http.ResponseWriter, _ *http.Request) {
		is.mu.Lock()
		defer is.mu.Unlock()
		json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{
			{Key: &is.key.PublicKey, KeyID: is.kid, Algorithm: "RS256", Use: "sig"},
		}})
	})
	is.srv = httptest.NewServer(mux)
	t.Cleanup(is.srv.Close)
	return is
}

// rotate replaces the issuer's key: tokens signed with the old one fail.
func (is *testIssuer) rotate(t *testing.T, kid string) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	is.mu.Lock()
	is.key, is.kid = key, kid
	is.mu.Unlock()
}

// token signs claims (iss, aud, exp filled in unless set) with key (the
// issuer's current one when nil).
func (is *testIssuer) token(t *testing.T, claims map[string]any, key *rsa.PrivateKey) string {
	t.Helper()
	is.mu.Lock()
	kid := is.kid
	if key == nil {
		key = is.key
	}
	is.mu.Unlock()
	sig, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: key},
		(&jose.SignerOptions{}).WithType("JWT").WithHeader("kid", kid))
	if err != nil {
		t.Fatal(err)
	}
	all := map[string]any{"iss": is.srv.URL, "aud": "forever", "sub": "user-1",
		"exp": time.Now().Add(time.Hour).Unix(), "iat": time.Now().Unix()}
	for k, v := range claims {
		all[k] = v
	}
	raw, err := jwt.Signed(sig).Claims(all).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// testBinaryOIDC: a JWT of the --oidc-issuer selects the tenant its claim
// names; a forged, expired or foreign token is 401, a token for a tenant
// nobody created 403, and a rotated issuer key is picked up.
func testBinaryOIDC(t *testing.T, bin string) {
	is := newTestIssuer(t)
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	httpAddr, natsAddr := agentdtest.FreeAddr(t), agentdtest.FreeAddr(t)
	startAgentd(t, bin, data, httpAddr, natsAddr, "--auth", "--local-rate", "-1",
		"--oidc-issuer", is.srv.URL, "--oidc-audience", "forever", "--oidc-tenant-claim", "org")
	acme := createTenant(t, bin, "nats://"+natsAddr, filepath.Join(data, agentd.AdminCredsFile), filepath.Join(dir, "out"), "acme")
	url := "http://" + httpAddr + "/v1/chat/bot/messages"
	if code, body := authedGet(t, url, acme.Token); code != 200 {
		t.Fatalf("API token: %d %s", code, body)
	}
	if code, body := authedGet(t, url, is.token(t, map[string]any{"org": "acme"}, nil)); code != 200 {
		t.Fatalf("OIDC token: %d %s", code, body)
	}
	other, _ := rsa.GenerateKey(rand.Reader, 2048)
	for name, tok := range map[string]string{
		"forged":         is.token(t, map[string]any{"org": "acme"}, other),
		"expired":        is.token(t, map[string]any{"org": "acme", "exp": time.Now().Add(-time.Hour).Unix()}, nil),
		"other audience": is.token(t, map[string]any{"org": "acme", "aud": "someone-else"}, nil),
		"other issuer":   is.token(t, map[string]any{"org": "acme", "iss": "https://evil.example"}, nil),
		"no claim":       is.token(t, nil, nil),
		"bad tenant":     is.token(t, map[string]any{"org": "ACME!"}, nil),
	} {
		if code, _ := authedGet(t, url, tok); code != 401 {
			t.Errorf("%s token: %d, want 401", name, code)
		}
	}
	if code, _ := authedGet(t, url, is.token(t, map[string]any{"org": "ghost"}, nil)); code != 403 {
		t.Errorf("token for a tenant that does not exist: %d, want 403", code)
	}
	is.rotate(t, "k2")
	if code, body := authedGet(t, url, is.token(t, map[string]any{"org": "acme"}, nil)); code != 200 {
		t.Fatalf("token signed with the rotated key: %d %s", code, body)
	}
}
