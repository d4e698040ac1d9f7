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
func (g *Gateway) getPage(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Content-Type-Options", "nosniff")
	w.Write(page)
}
