package replay

import (
	"net/http"
	"net/url"
	"path"
	"strings"

	"github.com/forever-agents/forever/internal/apierror"
	"github.com/prometheus/client_golang/prometheus"
)

// Cross-origin browsers. A request without an Origin header (curl, Go and
// server-side clients) or from the gateway's own origin is always served.
// A browser on another origin is served only when GatewayConfig.AllowedOrigins
// lists it, over HTTP (CORS) and WebSocket alike; otherwise it gets 403
// before anything runs, so a page elsewhere cannot start turns (which cost
// money) with a simple form post.
//
// "Own origin" means an Origin whose host:port is the request's Host: the
// scheme cannot be checked behind a TLS-terminating proxy. Alone, that
// lets a DNS-rebinding page through (Host: evil.example:8080 with Origin:
// http://evil.example:8080 is "same-origin"); HostCheck in front closes
// it, since such a Host is neither loopback nor listed.
//
// With authentication in front of the gateway, a browser's preflight
// carries no credentials and would get 401 without CORS headers, so the
// page could not call at all: CORS (or Gateway.CORS) goes in front of the
// authentication. It answers preflights itself and puts the CORS headers
// on every response to an allowed origin, a 401 included, so the page can
// read why it was refused.

// corsMaxAge is how long a browser may cache a preflight answer, in seconds.
const corsMaxAge = "600"

// originAllowed reports whether origin, an Origin header, matches one of
// patterns. A pattern containing "://" is matched against the origin's
// scheme://host[:port], any other against its host[:port], with path.Match
// and case folded ("*.example.com", "https://app.example.com",
// "localhost:*", "*" for any host): the rules coder/websocket applies to
// WebSocket origins, so both transports agree.
func originAllowed(patterns []string, origin string) bool {
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" {
		return false
	}
	for _, p := range patterns {
		target := u.Host
		if strings.Contains(p, "://") {
			target = u.Scheme + "://" + u.Host
		}
		if ok, err := path.Match(strings.ToLower(p), strings.ToLower(target)); err == nil && ok {
			return true
		}
	}
	return false
}

// sameOrigin reports whether origin names the host the request was sent to.
func sameOrigin(r *http.Request, origin string) bool {
	u, err := url.Parse(origin)
	return err == nil && strings.EqualFold(u.Host, r.Host)
}

// CORS returns a handler that applies the gateway's cross-origin rules
// (the patterns of GatewayConfig.AllowedOrigins; one that is not a valid
// pattern matches nothing) in front of next, for a server that
// authenticates requests: put it between HostCheck and the
// authentication, as in
//
//	replay.HostCheck(hosts, replay.CORS(origins, auth(mux)))
//
// A request without Origin or from the server's own origin goes to next
// untouched. One from an origin not allowed gets 403 {"code":403,...}. One
// from an allowed origin gets Access-Control-Allow-Origin (and Vary,
// Access-Control-Expose-Headers) on whatever next answers, a 401
// included; its preflight (OPTIONS) is answered 204 here, without
// credentials, as browsers send it. The gateway behind it does not apply
// the rules twice. Gateway.CORS is the same, counted in the gateway's
// forever_replay_refused_origins_total.
func CORS(allowedOrigins []string, next http.Handler) http.Handler {
	return corsHandler{allowed: allowedOrigins, next: next}
}

// CORS is the package's CORS with the gateway's AllowedOrigins, counting
// refusals in the gateway's metrics.
func (g *Gateway) CORS(next http.Handler) http.Handler {
	return corsHandler{allowed: g.cfg.AllowedOrigins, refused: g.metrics.refusedOrigins, next: next}
}

type corsHandler struct {
	allowed []string
	refused prometheus.Counter // nil: not counted
	next    http.Handler
}

func (c corsHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if applyCORS(c.allowed, c.refused, w, r) {
		c.next.ServeHTTP(w, r)
	}
}

// cors applies the cross-origin rules to r, unless a CORS handler in front
// did (the response already allows the origin). It returns false when it
// answered the request itself: a preflight (OPTIONS), or 403 for an origin
// not allowed.
func (g *Gateway) cors(w http.ResponseWriter, r *http.Request) bool {
	if w.Header().Get("Access-Control-Allow-Origin") != "" {
		return true
	}
	return applyCORS(g.cfg.AllowedOrigins, g.metrics.refusedOrigins, w, r)
}

// applyCORS applies the cross-origin rules of allowed to r; see cors.
// refused, when not nil, counts the origins refused.
func applyCORS(allowed []string, refused prometheus.Counter, w http.ResponseWriter, r *http.Request) bool {
	origin := r.Header.Get("Origin")
	if origin == "" || sameOrigin(r, origin) {
		return true
	}
	if !originAllowed(allowed, origin) {
		if refused != nil {
			refused.Inc()
		}
		apierror.New(apierror.Forbidden, "origin %q may not call this server: a browser page elsewhere needs its origin allowed with --cors-origin", echo(origin)).WriteHTTP(w)
		return false
	}
	h := w.Header()
	h.Set("Access-Control-Allow-Origin", origin)
	h.Add("Vary", "Origin")
	h.Set("Access-Control-Expose-Headers", "Retry-After, X-Vercel-AI-UI-Message-Stream")
	if r.Method != http.MethodOptions {
		return true
	}
	h.Set("Access-Control-Allow-Methods", "GET, POST, OPTIONS")
	if req := r.Header.Get("Access-Control-Request-Headers"); req != "" {
		h.Set("Access-Control-Allow-Headers", req)
	}
	h.Set("Access-Control-Max-Age", corsMaxAge)
	w.WriteHeader(http.StatusNoContent)
	return false
}
