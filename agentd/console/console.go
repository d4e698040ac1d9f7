package console

import (
	_ "embed"
	"net/http"
)

//go:embed web/console.html
var page []byte

// Handler serves the console page. It holds no data, so it needs no
// token; mount it as GET /console on the daemon that listens (under
// --auth, the daemon serving the tenants, before its front door).
func Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Type", "text/html; charset=utf-8")
		h.Set("Cache-Control", "no-cache")
		h.Set("X-Content-Type-Options", "nosniff")
		// Added: the daemon's own, frame-ancestors (--frame-ancestors),
		// holds too; the browser enforces each.
		h.Add("Content-Security-Policy", "default-src 'self'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'")
		w.Write(page)
	})
}
