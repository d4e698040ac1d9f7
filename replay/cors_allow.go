package replay

import "net/http"

// AllowOrigin applies the gateway's cross-origin rules (see cors.go) to a
// handler mounted beside it, with the same origin patterns: a request
// without an Origin header or from its own origin is served; an origin
// patterns allows gets the CORS headers (and a preflight is answered 204);
// any other gets 403 {"code":403,"error":...}. It returns false when it
// answered the request itself.
func AllowOrigin(w http.ResponseWriter, r *http.Request, patterns []string) bool {
	origin := r.Header.Get("Origin")
	if origin == "" || sameOrigin(r, origin) {
		return true
	}
	if !originAllowed(patterns, origin) {
		writeJSON(w, http.StatusForbidden, map[string]any{"code": http.StatusForbidden, "error": "origin " + origin + " is not allowed (agentd --cors-origin)"})
		return false
	}
	h := w.Header()
	h.Set("Access-Control-Allow-Origin", origin)
	h.Add("Vary", "Origin")
	h.Set("Access-Control-Expose-Headers", "Retry-After")
	if r.Method != http.MethodOptions {
		return true
	}
	h.Set("Access-Control-Allow-Methods", "GET, OPTIONS")
	if req := r.Header.Get("Access-Control-Request-Headers"); req != "" {
		h.Set("Access-Control-Allow-Headers", req)
	}
	h.Set("Access-Control-Max-Age", corsMaxAge)
	w.WriteHeader(http.StatusNoContent)
	return false
}
