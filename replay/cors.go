package replay

import (
	"net/http"
	"net/url"
	"path"
	"strings"

	"github.com/forever-agents/forever/internal/apierror"
)

// Cross-origin browsers. A request without an Origin header (curl, Go and
// server-side clients) or from the gateway's own origin is always served.
// A browser on another origin is served only when GatewayConfig.AllowedOrigins
// lists it, over HTTP (CORS) and WebSocket alike; otherwise it gets 403
// before anything runs, so a page elsewhere cannot start turns (which cost
// money) with a simple form post.

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

// cors applies the cross-origin rules to r. It returns false when it
// answered the request itself: a preflight (OPTIONS), or 403 for an origin
// not allowed.
func (g *Gateway) cors(w http.ResponseWriter, r *http.Request) bool {
	origin := r.Header.Get("Origin")
	if origin == "" || sameOrigin(r, origin) {
		return true
	}
	if !originAllowed(g.cfg.AllowedOrigins, origin) {
		g.metrics.refusedOrigins.Inc()
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
