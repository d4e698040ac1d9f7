package tenancy

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/forever-agents/forever/agentd/host"
	"github.com/forever-agents/forever/agentd/quota"
	"github.com/forever-agents/forever/auth"
	"github.com/forever-agents/forever/auth/oidc"
	"github.com/forever-agents/forever/replay"
)

// tokenVerifier maps a bearer token that is not one of ours (an OIDC JWT)
// to its claims.
type tokenVerifier interface {
	Verify(ctx context.Context, raw string) (oidc.Claims, error)
}

// adminPaths are the paths of a tenant's daemon only its admin
// credentials reach.
var adminPaths = []string{"/debug/"}

// refusal is a request the front door refuses: its status, reason (the
// forever_auth_refused_total label) and message.
type refusal struct {
	code   int
	reason string
	msg    string
}

// ServeHTTP routes a request to its tenant's daemon by its bearer token:
// an API token minted by tenant create, or a JWT of the OIDC issuer. It
// refuses, before any handler runs: no token, an unknown, revoked or
// expired one (401); a disabled tenant, a tenant nobody created, a path
// the credential's role does not reach (403). The tenant's daemon not
// running (yet): 503. The request carries the credential's identity
// (auth.IdentityFrom), which commands check against their verb. A request
// that outlives its credential (a stream, a WebSocket: revoked, expired,
// or its tenant disabled or revoked) is ended.
func (ts *tenantSet) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/" && (r.Method == http.MethodGet || r.Method == http.MethodHead) {
		// The chat page holds no data: it asks for the token itself.
		replay.ServePage(w, r)
		return
	}
	if r.URL.Path == "/v1/tenants" {
		ts.serveTenants(w, r)
		return
	}
	id, ends, ref := ts.authenticate(r)
	if ref != nil {
		ts.refuse(w, r, id, ref)
		return
	}
	ts.mu.Lock()
	run := ts.mu.runs[id.Tenant]
	st := ts.mu.states[id.Tenant]
	moving := st != nil && st.moving
	ts.mu.Unlock()
	if run == nil {
		msg := "tenant " + id.Tenant + " is not served on this node yet"
		if moving {
			msg = "tenant " + id.Tenant + " is moving into shards (agentd tenant move): its agents are back when the move ends"
		}
		w.Header().Set("Retry-After", host.RetryAfterSeconds)
		writeJSON(w, http.StatusServiceUnavailable, map[string]any{"error": msg, "code": 503})
		return
	}
	for _, p := range adminPaths {
		if strings.HasPrefix(r.URL.Path, p) && !id.Role.AtLeast(auth.RoleAdmin) {
			ts.refuse(w, r, id, &refusal{http.StatusForbidden, "role", "credential " + id.Cred + " (role " + string(id.Role) + ") may not reach " + p + ": it needs the admin role"})
			return
		}
	}
	if err := run.d.Quotas().Allow(); err != nil {
		ts.auditQuota(r, id, err)
		var qe *quota.Error
		errors.As(err, &qe)
		w.Header().Set("Retry-After", quota.RetryAfterSeconds(qe.RetryAfter()))
		writeJSON(w, http.StatusTooManyRequests, map[string]any{"error": err.Error(), "code": 429})
		return
	}
	ctx, cancel := context.WithCancel(auth.WithIdentity(r.Context(), id))
	defer cancel()
	cw := &cutWriter{ResponseWriter: w}
	go func() {
		var expired <-chan time.Time
		if !ends.expires.IsZero() {
			t := time.NewTimer(time.Until(ends.expires))
			defer t.Stop()
			expired = t.C
		}
		select {
		case <-ends.revoked:
		case <-ends.cut:
		case <-expired:
		case <-ctx.Done():
			return
		}
		cancel()
		cw.cut() // a hijacked connection (a WebSocket) does not watch ctx
	}()
	run.d.Handler().ServeHTTP(cw, r.WithContext(ctx))
}

// requestEnds are what ends a request once admitted: its token revoked,
// its tenant disabled or revoked, its credential's expiry.
type requestEnds struct {
	revoked <-chan struct{} // nil for an OIDC token
	cut     <-chan struct{}
	expires time.Time
}

// authenticate finds the identity of r's bearer token, or why it is
// refused.
func (ts *tenantSet) authenticate(r *http.Request) (auth.Identity, requestEnds, *refusal) {
	id := auth.Identity{From: r.RemoteAddr}
	var ends requestEnds
	raw, ok := bearer(r)
	if !ok {
		return id, ends, &refusal{http.StatusUnauthorized, "missing", "missing bearer token: send Authorization: Bearer <token>"}
	}
	var iat time.Time
	oidcToken := false
	ts.mu.Lock()
	e, ours := ts.mu.tokens[auth.HashToken(raw)]
	ts.mu.Unlock()
	switch {
	case auth.IsAdminToken(raw):
		exp, err := ts.op.Keys.VerifyAdminToken(raw, time.Now())
		if err != nil {
			return id, ends, &refusal{http.StatusUnauthorized, "invalid", "invalid or expired admin token"}
		}
		id.Tenant, id.Cred, id.Role = r.Header.Get(HeaderTenant), "admin-token", auth.RoleAdmin
		ends.expires = exp
		if id.Tenant == "" {
			return id, ends, &refusal{http.StatusBadRequest, "no-tenant", "the admin token reaches every tenant: name one with the " + HeaderTenant + " header (GET /v1/tenants lists them)"}
		}
	case ours:
		id.Tenant, id.Cred, id.Role = e.tenant, e.cred.Name, e.cred.Role
		ends.revoked = e.revoked
		if e.cred.Expires != 0 {
			ends.expires = time.Unix(e.cred.Expires, 0)
			if !time.Now().Before(ends.expires) {
				return id, ends, &refusal{http.StatusUnauthorized, "expired", "credential " + e.cred.Name + " expired at " + ends.expires.UTC().Format(time.RFC3339)}
			}
		}
	case ts.verify != nil && strings.Count(raw, ".") == 2:
		c, err := ts.verify.Verify(r.Context(), raw)
		if err != nil {
			ts.logger.Debug("oidc token refused", "err", err)
			return id, ends, &refusal{http.StatusUnauthorized, "invalid", "invalid or revoked bearer token"}
		}
		id.Tenant, id.Cred, id.Role = c.Tenant, "oidc:"+c.Subject, c.Role
		ends.expires, iat, oidcToken = c.Expiry, c.IssuedAt, true
	default:
		return id, ends, &refusal{http.StatusUnauthorized, "invalid", "invalid or revoked bearer token"}
	}
	ts.mu.Lock()
	st := ts.mu.states[id.Tenant]
	var disabled bool
	var revokedAt int64
	if st != nil {
		disabled, revokedAt, ends.cut = st.disabled, st.revokedAt, st.cut
	}
	ts.mu.Unlock()
	switch {
	case st == nil:
		// A valid token of the issuer for a tenant nobody created.
		return id, ends, &refusal{http.StatusForbidden, "unknown-tenant", "tenant " + id.Tenant + " does not exist"}
	case disabled:
		return id, ends, &refusal{http.StatusForbidden, "disabled", "tenant " + id.Tenant + " is disabled"}
	case oidcToken && revokedAt != 0 && (iat.IsZero() || iat.Unix() <= revokedAt):
		// Revocation refuses every token issued until then, OIDC ones
		// too: the issuer must issue a new one.
		return id, ends, &refusal{http.StatusUnauthorized, "revoked", "the tenant's credentials were revoked after this token was issued"}
	}
	return id, ends, nil
}

// HeaderTenant names the tenant a request with the admin's HTTP token
// (auth.AdminToken) is for; other tokens name their tenant themselves and
// ignore it.
const HeaderTenant = "X-Forever-Tenant"

// TenantInfo is one tenant of GET /v1/tenants.
type TenantInfo struct {
	Name     string `json:"name"`
	Disabled bool   `json:"disabled"`
	// Moving is set while its log moves into shards (agentd tenant move):
	// no node serves it.
	Moving bool `json:"moving,omitempty"`
	// Served is whether this node runs the tenant's daemon now.
	Served bool `json:"served"`
	// Quota is the quota enforced: the tenant's record resolved with the
	// node's defaults (0: no limit).
	Quota auth.Quota `json:"quota"`
	// Budget is the tenant's spend limits (its record's over the node's
	// per-user budget); absent without any.
	Budget auth.Budget `json:"budget,omitzero"`
	// Usage is what the tenant uses, read from its account now; absent
	// when the tenant is not served here or its JetStream did not answer
	// (UsageError says why).
	Usage      *quota.Usage `json:"usage,omitempty"`
	UsageError string       `json:"usageError,omitempty"`
}

// serveTenants answers GET /v1/tenants, for the admin's HTTP token only:
// {"tenants": [TenantInfo...]} sorted by name, each with its quota and,
// when served here, its usage (read from every served tenant's account at
// once, each within agentd's read bound). Any other token is 403.
func (ts *tenantSet) serveTenants(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		writeJSON(w, http.StatusMethodNotAllowed, map[string]any{"error": "GET /v1/tenants only", "code": 405})
		return
	}
	raw, ok := bearer(r)
	if !ok {
		ts.refuse(w, r, auth.Identity{From: r.RemoteAddr}, &refusal{http.StatusUnauthorized, "missing", "missing bearer token: send Authorization: Bearer <token>"})
		return
	}
	if !auth.IsAdminToken(raw) {
		ts.refuse(w, r, auth.Identity{From: r.RemoteAddr}, &refusal{http.StatusForbidden, "role", "GET /v1/tenants needs the admin's HTTP token (agentd auth admin-token)"})
		return
	}
	if _, err := ts.op.Keys.VerifyAdminToken(raw, time.Now()); err != nil {
		ts.refuse(w, r, auth.Identity{From: r.RemoteAddr}, &refusal{http.StatusUnauthorized, "invalid", "invalid or expired admin token"})
		return
	}
	pc := ts.parent.Config()
	ts.mu.Lock()
	out := make([]TenantInfo, 0, len(ts.mu.states))
	var runs []*tenantRun // of out[i], nil when not served
	for name, st := range ts.mu.states {
		if st.rec == nil {
			continue
		}
		run := ts.mu.runs[name]
		out = append(out, TenantInfo{Name: name, Disabled: st.disabled, Moving: st.moving, Served: run != nil, Quota: pc.TenantQuota(st.rec.Quota), Budget: pc.UserBudgetOf(st.rec.Budget)})
		runs = append(runs, run)
	}
	ts.mu.Unlock()
	var wg sync.WaitGroup
	for i, run := range runs {
		if run == nil {
			continue
		}
		wg.Go(func() {
			u, err := run.d.Usage(r.Context())
			if err != nil {
				out[i].UsageError = err.Error()
				return
			}
			out[i].Usage = &u
		})
	}
	wg.Wait()
	slices.SortFunc(out, func(a, b TenantInfo) int { return strings.Compare(a.Name, b.Name) })
	writeJSON(w, http.StatusOK, map[string]any{"tenants": out})
}

// refuse answers a refused request: 401 with WWW-Authenticate, or 403.
func (ts *tenantSet) refuse(w http.ResponseWriter, r *http.Request, id auth.Identity, ref *refusal) {
	ts.authRefused.WithLabelValues(ref.reason).Inc()
	ts.auditRefusal(r, id, ref)
	if ref.code == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="forever"`)
	}
	writeJSON(w, ref.code, map[string]any{"error": ref.msg, "code": ref.code})
}

// wsPath is the WebSocket endpoint, the only one that takes the token in
// its query.
var wsPath = regexp.MustCompile(`^/v1/chat/[^/]+/ws$`)

// bearer returns the request's bearer token: the Authorization header, or
// for a WebSocket upgrade of the WebSocket endpoint (browsers cannot set
// headers on one) the access_token query parameter (RFC 6750 section 2.3).
// Anywhere else a token in the query is ignored: URLs end up in logs and
// Referer headers.
func bearer(r *http.Request) (string, bool) {
	h := r.Header.Get("Authorization")
	scheme, tok, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		if r.Method == http.MethodGet && strings.EqualFold(r.Header.Get("Upgrade"), "websocket") && wsPath.MatchString(r.URL.Path) {
			tok = r.URL.Query().Get("access_token")
			return tok, tok != ""
		}
		return "", false
	}
	tok = strings.TrimSpace(tok)
	return tok, tok != ""
}

// cutWriter lets the front door close a hijacked connection (a WebSocket)
// whose credential is revoked: the handler of one no longer watches the
// request's context. It passes Flush and Hijack through.
type cutWriter struct {
	http.ResponseWriter
	mu   sync.Mutex
	conn net.Conn
	done bool // cut was called
}

func (w *cutWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *cutWriter) Flush() { _ = http.NewResponseController(w.ResponseWriter).Flush() }

func (w *cutWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, rw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err != nil {
		return c, rw, err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.conn = c
	if w.done {
		c.Close()
	}
	return c, rw, nil
}

// cut closes the hijacked connection, now or once there is one.
func (w *cutWriter) cut() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.done = true
	if w.conn != nil {
		w.conn.Close()
	}
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}
