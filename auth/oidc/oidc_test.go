package oidc

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"github.com/forever-agents/forever/auth"
	"github.com/forever-agents/forever/internal/waitfor"
)

const testAudience = "forever"

// testIssuer is an OIDC issuer: a discovery document and a JWKS holding
// its current key; tokens are signed with that key.
type testIssuer struct {
	url       string
	client    *http.Client // reaches the issuer
	jwksFetch atomic.Int64 // JWKS requests served

	mu  sync.Mutex
	key *rsa.PrivateKey
	kid string
}

// newTestIssuer starts a real issuer on a local httptest.Server.
func newTestIssuer(tb testing.TB) *testIssuer {
	tb.Helper()
	is := &testIssuer{}
	is.rotate(tb, "k1")
	srv := httptest.NewServer(is.handler())
	tb.Cleanup(srv.Close)
	is.url, is.client = srv.URL, srv.Client()
	return is
}

// newMemIssuer is an issuer served in memory by its client's transport,
// with no listener: the fuzz target's, where network goroutines would
// make coverage flaky.
func newMemIssuer(tb testing.TB) *testIssuer {
	tb.Helper()
	is := &testIssuer{url: "https://issuer.test"}
	is.rotate(tb, "k1")
	is.client = &http.Client{Transport: handlerTransport{is.handler()}}
	return is
}

// handlerTransport answers requests with a handler, in the caller's
// goroutine.
type handlerTransport struct{ h http.Handler }

func (t handlerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	w := httptest.NewRecorder()
	t.h.ServeHTTP(w, r)
	return w.Result(), nil
}

func (is *testIssuer) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/openid-configuration", func(w http.ResponseWriter, _ *http.Request) {
		json.NewEncoder(w).Encode(map[string]any{
			"issuer":                                is.url,
			"jwks_uri":                              is.url + "/jwks",
			"authorization_endpoint":                is.url + "/auth",
			"token_endpoint":                        is.url + "/token",
			"id_token_signing_alg_values_supported": []string{"RS256"},
		})
	})
	mux.HandleFunc("GET /jwks", func(w http.ResponseWriter, _ *http.Request) {
		is.jwksFetch.Add(1)
		is.mu.Lock()
		defer is.mu.Unlock()
		json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{
			{Key: &is.key.PublicKey, KeyID: is.kid, Algorithm: "RS256", Use: "sig"},
		}})
	})
	return mux
}

// rotate replaces the issuer's key with a new one named kid; the old key
// leaves the JWKS.
func (is *testIssuer) rotate(tb testing.TB, kid string) {
	tb.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		tb.Fatal(err)
	}
	is.mu.Lock()
	is.key, is.kid = key, kid
	is.mu.Unlock()
}

// claims returns valid claims (iss, aud, sub, iat, exp) overridden by
// extra; a nil value in extra deletes the claim.
func (is *testIssuer) claims(extra map[string]any) map[string]any {
	now := time.Now()
	all := map[string]any{"iss": is.url, "aud": testAudience, "sub": "user-1",
		"iat": now.Unix(), "exp": now.Add(time.Hour).Unix()}
	for k, v := range extra {
		if v == nil {
			delete(all, k)
		} else {
			all[k] = v
		}
	}
	return all
}

// sign signs claims with RS256, key and kid.
func sign(tb testing.TB, claims map[string]any, key *rsa.PrivateKey, kid string) string {
	tb.Helper()
	sig, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: key},
		(&jose.SignerOptions{}).WithType("JWT").WithHeader("kid", kid))
	if err != nil {
		tb.Fatal(err)
	}
	raw, err := jwt.Signed(sig).Claims(claims).Serialize()
	if err != nil {
		tb.Fatal(err)
	}
	return raw
}

// token signs is.claims(extra) with the issuer's current key.
func (is *testIssuer) token(tb testing.TB, extra map[string]any) string {
	tb.Helper()
	is.mu.Lock()
	key, kid := is.key, is.kid
	is.mu.Unlock()
	return sign(tb, is.claims(extra), key, kid)
}

func (is *testIssuer) verifier(tb testing.TB, claim string) *Verifier {
	tb.Helper()
	v, err := New(context.Background(), Config{Issuer: is.url, Audience: testAudience,
		TenantClaim: claim, HTTPClient: is.client})
	if err != nil {
		tb.Fatal(err)
	}
	return v
}

// unsigned returns an "alg: none" token of claims.
func unsigned(tb testing.TB, claims map[string]any) string {
	tb.Helper()
	p, err := json.Marshal(claims)
	if err != nil {
		tb.Fatal(err)
	}
	enc := base64.RawURLEncoding.EncodeToString
	return enc([]byte(`{"alg":"none","typ":"JWT"}`)) + "." + enc(p) + "."
}

// hmacWithPublicKey signs claims with HS256 keyed by the issuer's public
// key, the classic algorithm-confusion forgery.
func hmacWithPublicKey(tb testing.TB, is *testIssuer, claims map[string]any) string {
	tb.Helper()
	is.mu.Lock()
	der, err := x509.MarshalPKIXPublicKey(&is.key.PublicKey)
	kid := is.kid
	is.mu.Unlock()
	if err != nil {
		tb.Fatal(err)
	}
	sig, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.HS256, Key: der},
		(&jose.SignerOptions{}).WithType("JWT").WithHeader("kid", kid))
	if err != nil {
		tb.Fatal(err)
	}
	raw, err := jwt.Signed(sig).Claims(claims).Serialize()
	if err != nil {
		tb.Fatal(err)
	}
	return raw
}

// checkRejected fails unless err is a rejection of raw that does not
// quote it.
func checkRejected(t *testing.T, name, raw string, err error) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: accepted", name)
		return
	}
	if !errors.Is(err, ErrInvalidToken) {
		t.Errorf("%s: %v does not wrap ErrInvalidToken", name, err)
	}
	if raw != "" && strings.Contains(err.Error(), raw) {
		t.Errorf("%s: error quotes the token: %v", name, err)
	}
}

func TestTenantValid(t *testing.T) {
	is := newTestIssuer(t)
	v := is.verifier(t, "")
	ctx := context.Background()
	for _, c := range []struct {
		extra map[string]any
		want  string
	}{
		{map[string]any{"tenant": "acme"}, "acme"},
		{map[string]any{"tenant": "a"}, "a"},
		{map[string]any{"tenant": "0-team-7"}, "0-team-7"},
		{map[string]any{"tenant": strings.Repeat("x", 63)}, strings.Repeat("x", 63)},
		// aud may be a list holding the audience among others.
		{map[string]any{"tenant": "acme", "aud": []string{"other", testAudience}}, "acme"},
	} {
		got, err := v.Tenant(ctx, is.token(t, c.extra))
		if err != nil || got != c.want {
			t.Errorf("claims %v: %q, %v; want %q", c.extra, got, err, c.want)
		}
	}
}

func TestTenantClaimConfigured(t *testing.T) {
	is := newTestIssuer(t)
	v := is.verifier(t, "org")
	ctx := context.Background()
	if got, err := v.Tenant(ctx, is.token(t, map[string]any{"org": "acme", "tenant": "other"})); err != nil || got != "acme" {
		t.Fatalf("org claim: %q, %v; want acme", got, err)
	}
	raw := is.token(t, map[string]any{"tenant": "acme"})
	_, err := v.Tenant(ctx, raw)
	checkRejected(t, "only the default claim", raw, err)
}

func TestTenantRejected(t *testing.T) {
	is := newTestIssuer(t)
	v := is.verifier(t, "")
	ctx := context.Background()
	other, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	ok := map[string]any{"tenant": "acme"}
	withTenant := func(extra map[string]any) map[string]any {
		m := map[string]any{"tenant": "acme"}
		for k, v := range extra {
			m[k] = v
		}
		return m
	}
	// Each case names a fragment of the reason it must be refused for, so
	// that a case cannot pass by failing an earlier check.
	cases := map[string]struct{ raw, why string }{
		"signed with another key, same kid":  {sign(t, is.claims(ok), other, "k1"), "verify id token signature"},
		"signed with another key, other kid": {sign(t, is.claims(ok), other, "evil"), "verify id token signature"},
		"wrong issuer":                       {is.token(t, withTenant(map[string]any{"iss": "https://evil.example"})), "different provider"},
		"no issuer":                          {is.token(t, withTenant(map[string]any{"iss": nil})), "different provider"},
		"wrong audience":                     {is.token(t, withTenant(map[string]any{"aud": "someone-else"})), "expected audience"},
		"audience list without ours":         {is.token(t, withTenant(map[string]any{"aud": []string{"a", "b"}})), "expected audience"},
		"no audience":                        {is.token(t, withTenant(map[string]any{"aud": nil})), "expected audience"},
		"expired":                            {is.token(t, withTenant(map[string]any{"exp": time.Now().Add(-time.Minute).Unix()})), "expired"},
		"no expiry":                          {is.token(t, withTenant(map[string]any{"exp": nil})), "expired"},
		"not yet valid":                      {is.token(t, withTenant(map[string]any{"nbf": time.Now().Add(time.Hour).Unix()})), "nbf"},
		"missing tenant claim":               {is.token(t, nil), "no string claim"},
		"empty tenant":                       {is.token(t, map[string]any{"tenant": ""}), "not a tenant name"},
		"numeric tenant":                     {is.token(t, map[string]any{"tenant": 42}), "no string claim"},
		"list tenant":                        {is.token(t, map[string]any{"tenant": []string{"acme"}}), "no string claim"},
		"object tenant":                      {is.token(t, map[string]any{"tenant": map[string]any{"name": "acme"}}), "no string claim"},
		"upper-case tenant":                  {is.token(t, map[string]any{"tenant": "ACME"}), "not a tenant name"},
		"tenant with a dot":                  {is.token(t, map[string]any{"tenant": "acme.corp"}), "not a tenant name"},
		"tenant starting with a dash":        {is.token(t, map[string]any{"tenant": "-acme"}), "not a tenant name"},
		"tenant of 64 characters":            {is.token(t, map[string]any{"tenant": strings.Repeat("x", 64)}), "not a tenant name"},
		"tenant with a newline":              {is.token(t, map[string]any{"tenant": "acme\n"}), "not a tenant name"},
		"tenant with unicode":                {is.token(t, map[string]any{"tenant": "acmé"}), "not a tenant name"},
		"tenant path":                        {is.token(t, map[string]any{"tenant": "../acme"}), "not a tenant name"},
		"alg none":                           {unsigned(t, is.claims(ok)), "unexpected signature algorithm"},
		"HS256 keyed with the public key":    {hmacWithPublicKey(t, is, is.claims(ok)), "unexpected signature algorithm"},
		"garbage":                            {"this is not a jwt at all, just some words", "malformed"},
		"empty":                              {"", "malformed"},
		"three garbage parts":                {"aaaa.bbbb.cccc", "malformed"},
		"with Bearer prefix":                 {"Bearer " + is.token(t, ok), "malformed"},
		"signature cut":                      {strings.TrimRight(is.token(t, ok), "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"), "verify id token signature"},
		"payload swapped":                    {swapPayload(t, is.token(t, ok), is.token(t, map[string]any{"tenant": "victim"})), "verify id token signature"},
	}
	for name, c := range cases {
		got, err := v.Tenant(ctx, c.raw)
		checkRejected(t, name, c.raw, err)
		if err != nil && !strings.Contains(err.Error(), c.why) {
			t.Errorf("%s: refused for %v, want a refusal for %q", name, err, c.why)
		}
		if got != "" {
			t.Errorf("%s: tenant %q with an error", name, got)
		}
	}
}

// swapPayload returns a's header and signature around b's payload.
func swapPayload(t *testing.T, a, b string) string {
	t.Helper()
	pa, pb := strings.Split(a, "."), strings.Split(b, ".")
	if len(pa) != 3 || len(pb) != 3 {
		t.Fatal("not a compact JWS")
	}
	return pa[0] + "." + pb[1] + "." + pa[2]
}

// TestKeyRotation: the issuer replaces its key with one under a new kid;
// a token signed with the new key verifies because go-oidc fetches the
// JWKS again for the unknown kid, and the retired key no longer works.
func TestKeyRotation(t *testing.T) {
	is := newTestIssuer(t)
	v := is.verifier(t, "")
	ctx := context.Background()
	old := is.token(t, map[string]any{"tenant": "acme"})
	if got, err := v.Tenant(ctx, old); err != nil || got != "acme" {
		t.Fatalf("before rotation: %q, %v", got, err)
	}
	before := is.jwksFetch.Load()
	if before < 1 {
		t.Fatalf("JWKS fetched %d times before rotation, want at least 1", before)
	}
	// A known key is served from the cache.
	if _, err := v.Tenant(ctx, old); err != nil {
		t.Fatal(err)
	}
	if n := is.jwksFetch.Load(); n != before {
		t.Errorf("JWKS fetched again for a known kid: %d, was %d", n, before)
	}

	is.rotate(t, "k2")
	if got, err := v.Tenant(ctx, is.token(t, map[string]any{"tenant": "acme"})); err != nil || got != "acme" {
		t.Fatalf("token of the rotated key: %q, %v", got, err)
	}
	if n := is.jwksFetch.Load(); n <= before {
		t.Errorf("JWKS not fetched again after rotation: %d fetches, was %d", n, before)
	}
	// go-oidc answers the waiting verification before it stores the
	// fetched key set (jwks.go, keysFromRemote), so for a moment after a
	// rotation the cache still holds the retired key: allow it a moment.
	var err error
	waitfor.Within(t, 2*time.Second, func() error {
		if _, err = v.Tenant(ctx, old); err == nil {
			return errors.New("the retired key's token to be rejected")
		}
		return nil
	})
	checkRejected(t, "token of the retired key", old, err)
}

// TestTenantConcurrent runs Tenant from many goroutines across a key
// rotation (for -race).
func TestTenantConcurrent(t *testing.T) {
	is := newTestIssuer(t)
	v := is.verifier(t, "")
	ctx := context.Background()
	tok := is.token(t, map[string]any{"tenant": "acme"})
	is.rotate(t, "k2")
	tok2 := is.token(t, map[string]any{"tenant": "beta"})
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			raw, want := tok, ""
			if i%2 == 1 {
				raw, want = tok2, "beta"
			}
			got, err := v.Tenant(ctx, raw)
			if want == "" {
				if err == nil {
					t.Errorf("retired key accepted")
				}
			} else if err != nil || got != want {
				t.Errorf("%q, %v; want %q", got, err, want)
			}
		}()
	}
	wg.Wait()
}

func TestNewErrors(t *testing.T) {
	is := newTestIssuer(t)
	ctx := context.Background()
	c := is.client
	if _, err := New(ctx, Config{Audience: testAudience, HTTPClient: c}); err == nil {
		t.Error("no issuer: no error")
	}
	if _, err := New(ctx, Config{Issuer: is.url, HTTPClient: c}); err == nil {
		t.Error("no audience: no error")
	}
	if _, err := New(ctx, Config{Issuer: is.url + "/nowhere", Audience: testAudience, HTTPClient: c}); err == nil {
		t.Error("no discovery document: no error")
	}
	// The discovery document names another issuer.
	if _, err := New(ctx, Config{Issuer: is.url + "/", Audience: testAudience, HTTPClient: c}); err == nil {
		t.Error("issuer mismatch: no error")
	}
}

// TestNewBoundedByContext: discovery that never answers ends with ctx.
func TestNewBoundedByContext(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer srv.Close()
	defer close(release)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := New(ctx, Config{Issuer: srv.URL, Audience: testAudience, HTTPClient: srv.Client()})
	if err == nil {
		t.Fatal("no error")
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("error %v is not the context's", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("New returned after %v", d)
	}
}

// TestVerifierOutlivesNewContext: the key set is fetched after New's ctx
// is gone.
func TestVerifierOutlivesNewContext(t *testing.T) {
	is := newTestIssuer(t)
	ctx, cancel := context.WithCancel(context.Background())
	v, err := New(ctx, Config{Issuer: is.url, Audience: testAudience, HTTPClient: is.client})
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	if got, err := v.Tenant(context.Background(), is.token(t, map[string]any{"tenant": "acme"})); err != nil || got != "acme" {
		t.Fatalf("%q, %v", got, err)
	}
}

// FuzzTenant feeds arbitrary strings to Tenant: never a panic; a refusal
// wraps ErrInvalidToken and does not quote the input; an acceptance names
// a valid tenant.
func FuzzTenant(f *testing.F) {
	is := newMemIssuer(f)
	v := is.verifier(f, "")
	valid := is.token(f, map[string]any{"tenant": "acme"})
	f.Add(valid)
	f.Add(is.token(f, map[string]any{"tenant": "ACME"}))
	f.Add(is.token(f, map[string]any{"tenant": 7}))
	f.Add(unsigned(f, is.claims(map[string]any{"tenant": "acme"})))
	f.Add("")
	f.Add(".")
	f.Add("..")
	f.Add("a.b.c")
	f.Add("eyJhbGciOiJSUzI1NiJ9.e30.")
	f.Add("Bearer x.y.z")
	f.Add(strings.Repeat("A", 300))
	f.Fuzz(func(t *testing.T, raw string) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		got, err := v.Tenant(ctx, raw)
		if err == nil {
			if got == "" || !validName(got) {
				t.Fatalf("accepted with tenant %q", got)
			}
			return
		}
		if got != "" {
			t.Fatalf("tenant %q with error %v", got, err)
		}
		if !errors.Is(err, ErrInvalidToken) {
			t.Fatalf("%v does not wrap ErrInvalidToken", err)
		}
		// Short inputs may occur in any message by chance.
		if len(raw) >= 32 && strings.Contains(err.Error(), raw) {
			t.Fatalf("error quotes the input: %v", err)
		}
	})
}

func validName(s string) bool {
	if len(s) == 0 || len(s) > 63 {
		return false
	}
	for i, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
		case r == '-' && i > 0:
		default:
			return false
		}
	}
	return true
}

// TestVerifyClaims: Verify returns the subject and issue time (which
// tenant revocation compares), and the role: writer without a role claim
// configured; with one, the claim's role, reader when absent, refused
// when it is not a role.
func TestVerifyClaims(t *testing.T) {
	is := newTestIssuer(t)
	ctx := context.Background()
	iat := time.Now().Add(-time.Minute).Truncate(time.Second)
	c, err := is.verifier(t, "").Verify(ctx, is.token(t, map[string]any{"tenant": "acme", "iat": iat.Unix(), "role": "reader"}))
	if err != nil || c.Tenant != "acme" || c.Subject != "user-1" || !c.IssuedAt.Equal(iat) || c.Role != auth.RoleWriter {
		t.Fatalf("claims %+v, %v", c, err)
	}
	v, err := New(ctx, Config{Issuer: is.url, Audience: testAudience, RoleClaim: "role", HTTPClient: is.client})
	if err != nil {
		t.Fatal(err)
	}
	for role, want := range map[any]auth.Role{"approver": auth.RoleApprover, "ADMIN": auth.RoleAdmin, nil: auth.RoleReader} {
		c, err := v.Verify(ctx, is.token(t, map[string]any{"tenant": "acme", "role": role}))
		if err != nil || c.Role != want {
			t.Errorf("role claim %v: %q %v, want %q", role, c.Role, err, want)
		}
	}
	for _, bad := range []any{"root", "", 3, []string{"admin"}} {
		raw := is.token(t, map[string]any{"tenant": "acme", "role": bad})
		_, err := v.Verify(ctx, raw)
		checkRejected(t, fmt.Sprintf("role %v", bad), raw, err)
	}
}
