package replay

import (
	_ "embed"
	"net/http"
)

// page is the chat page: plain HTML and JavaScript using the gateway.
//
//go:embed web/index.html
var page []byte

// getPage serves the chat page: GET /.
func (g *Gateway) getPage(w http.ResponseWriter, r *http.Request) { ServePage(w, r) }

// ServePage serves the chat page. It holds no data, so a server with auth
// serves it without a token: the page asks for one when the API answers
// 401, and keeps it in the tab's session storage.
func ServePage(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Content-Type-Options", "nosniff")
	w.Write(page)
}
