package agentd

import (
	"flag"
	"net/http"
	"strconv"
	"strings"
)

// Framing. A page of another origin that frames the console (or the chat
// page) under a decoy can make a click on it approve a pending tool call
// (clickjacking). Every response of the HTTP server says who may frame it,
// before any handler runs: Content-Security-Policy frame-ancestors 'self'
// and the origins of --frame-ancestors, and, when none are listed,
// X-Frame-Options: DENY for browsers that predate CSP (it cannot name a
// list, and browsers that know frame-ancestors ignore it). The headers go
// on every response, not only text/html: a JSON body framed is harmless,
// and a page a handler adds later is covered without a second thought. A
// handler that sets a Content-Security-Policy of its own adds it (the
// browser enforces each), as the console does.

// frameHeaders sets the framing headers of cfg on every response of h.
func frameHeaders(cfg *Config, h http.Handler) http.Handler {
	csp := "frame-ancestors 'self'"
	for _, o := range cfg.FrameAncestors {
		norm, _ := frameAncestor(o) // Validate checked them
		csp += " " + norm
	}
	deny := len(cfg.FrameAncestors) == 0
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hd := w.Header()
		hd.Add("Content-Security-Policy", csp)
		if deny {
			hd.Set("X-Frame-Options", "DENY")
		}
		h.ServeHTTP(w, r)
	})
}

// validateFrameAncestors checks each --frame-ancestors origin.
func (c *Config) validateFrameAncestors() error {
	for _, o := range c.FrameAncestors {
		if _, why := frameAncestor(o); why != "" {
			return configErrorf("frame-ancestors", "--frame-ancestors %q: %s", o, why)
		}
	}
	return nil
}

// frameAncestor parses an origin that may frame agentd's pages: http:// or
// https://, a host name or IPv4 address (optionally "*." before a name, for
// every name under it) and an optional port (a number or *). It returns
// the origin normalised, or why it is refused.
func frameAncestor(o string) (norm, why string) {
	const want = `want an origin such as "https://portal.example.com", "https://*.example.com" or "http://10.0.0.5:8080"`
	s := strings.TrimSuffix(strings.ToLower(strings.TrimSpace(o)), "/")
	scheme, rest, ok := strings.Cut(s, "://")
	if !ok || (scheme != "http" && scheme != "https") {
		return "", want + " (with http:// or https://)"
	}
	if rest == "" || strings.ContainsAny(rest, "/?#@") {
		return "", want + " (without path, query or user)"
	}
	host, port := rest, ""
	if i := strings.LastIndexByte(rest, ':'); i >= 0 {
		host, port = rest[:i], rest[i+1:]
		if n, err := strconv.ParseUint(port, 10, 16); port != "*" && (err != nil || n == 0 || port[0] == '0') {
			return "", "the port must be a number from 1 to 65535, or *"
		}
	}
	name := strings.TrimPrefix(host, "*.")
	if name == "" || len(name) > 253 {
		return "", want
	}
	for _, label := range strings.Split(name, ".") {
		if label == "" || len(label) > 63 {
			return "", want
		}
		for _, r := range label {
			if (r < 'a' || r > 'z') && (r < '0' || r > '9') && r != '-' {
				return "", want + ` ("*" may only begin the host, as "*.")`
			}
		}
	}
	return s, ""
}

// frameFlags defines --frame-ancestors.
func frameFlags(fs *flag.FlagSet, cfg *Config) {
	fs.Var((*listFlag)(&cfg.FrameAncestors), "frame-ancestors",
		"comma-separated `origins` whose pages may frame agentd's (the console, the chat page), such as https://portal.example.com or https://*.example.com; "+
			"every response carries Content-Security-Policy frame-ancestors 'self' and these; unset: only agentd's own pages, and X-Frame-Options: DENY")
}
