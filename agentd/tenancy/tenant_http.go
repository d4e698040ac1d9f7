package tenancy

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"

	"github.com/forever-agents/forever/agentd/host"
	"github.com/forever-agents/forever/agentd/quota"
	"github.com/forever-agents/forever/auth"
	"github.com/forever-agents/forever/replay"
)

// tokenVerifier maps a bearer token that is not one of ours (an OIDC JWT)
// to a tenant.
type tokenVerifier interface {
	Tenant(ctx context.Context, raw string) (string, error)
}

// ServeHTTP routes a request to its tenant's daemon by its bearer token:
// an API token minted by tenant create, or a JWT of the OIDC issuer. No
// valid token: 401. The tenant's daemon not running (yet): 503. A request
// that outlives its token's revocation (a stream, a WebSocket) is ended.
func (ts *tenantSet) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/" && (r.Method == http.MethodGet || r.Method == http.MethodHead) {
		// The chat page holds no data: it asks for the token itself.
		replay.ServePage(w, r)
		return
	}
	raw, ok := bearer(r)
	if !ok {
		ts.authRefused.WithLabelValues("missing").Inc()
		unauthorized(w, "missing bearer token: send Authorization: Bearer <token>")
		return
	}
	var name string
	var revoked <-chan struct{}
	ts.mu.Lock()
	if e, ok := ts.mu.tokens[auth.HashToken(raw)]; ok {
		name, revoked = e.tenant, e.revoked
	}
	ts.mu.Unlock()
	if name == "" && ts.verify != nil && strings.Count(raw, ".") == 2 {
		n, err := ts.verify.Tenant(r.Context(), raw)
		if err != nil {
			ts.logger.Debug("oidc token refused", "err", err)
		}
		ts.mu.Lock()
		_, exists := ts.mu.runs[n]
		ts.mu.Unlock()
		if err == nil && !exists {
			// A valid token of the issuer for a tenant nobody created.
			ts.authRefused.WithLabelValues("unknown-tenant").Inc()
			writeJSON(w, http.StatusForbidden, map[string]any{"error": "tenant " + n + " does not exist", "code": 403})
			return
		}
		name = n
	}
	if name == "" {
		ts.authRefused.WithLabelValues("invalid").Inc()
		unauthorized(w, "invalid or revoked bearer token")
		return
	}
	ts.mu.Lock()
	run := ts.mu.runs[name]
	ts.mu.Unlock()
	if run == nil {
		w.Header().Set("Retry-After", host.RetryAfterSeconds)
		writeJSON(w, http.StatusServiceUnavailable, map[string]any{"error": "tenant " + name + " is not served on this node yet", "code": 503})
		return
	}
	if err := run.d.Quotas().Allow(); err != nil {
		var qe *quota.Error
		errors.As(err, &qe)
		w.Header().Set("Retry-After", quota.RetryAfterSeconds(qe.RetryAfter()))
		writeJSON(w, http.StatusTooManyRequests, map[string]any{"error": err.Error(), "code": 429})
		return
	}
	if revoked != nil {
		ctx, cancel := context.WithCancel(r.Context())
		defer cancel()
		go func() {
			select {
			case <-revoked:
				cancel()
			case <-ctx.Done():
			}
		}()
		r = r.WithContext(ctx)
	}
	run.d.Handler().ServeHTTP(w, r)
}

// bearer returns the request's bearer token: the Authorization header, or
// for a WebSocket upgrade (browsers cannot set headers on one) the
// access_token query parameter (RFC 6750 section 2.3).
func bearer(r *http.Request) (string, bool) {
	h := r.Header.Get("Authorization")
	scheme, tok, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		if strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
			tok = r.URL.Query().Get("access_token")
			return tok, tok != ""
		}
		return "", false
	}
	tok = strings.TrimSpace(tok)
	return tok, tok != ""
}

func unauthorized(w http.ResponseWriter, msg string) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="forever"`)
	writeJSON(w, http.StatusUnauthorized, map[string]any{"error": msg, "code": 401})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}
