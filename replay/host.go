package replay

import (
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"strconv"
	"strings"

	"github.com/forever-agents/forever/internal/apierror"
)

// DNS rebinding. A page on evil.example whose name the attacker later
// points at 127.0.0.1 is, to the browser, same-origin with a local agentd
// it reaches that way: its requests carry Host: evil.example:8080 and
// Origin: http://evil.example:8080, so an Origin check against Host (cors)
// lets them through, and without auth they start turns and run tools. The
// Host check closes that: a server without auth answers only requests whose
// Host is a loopback name or address, or one its operator listed. A
// rebinding attacker controls the name, never the Host a browser sends for
// it.

// ErrBadHostPattern is returned by ParseHostPattern for a pattern it
// cannot use.
var ErrBadHostPattern = errors.New("replay: invalid host pattern")

// HostPattern is one Host a server answers besides loopback, as given to
// agentd --allowed-host: a name ("app.example.com"), every name under a
// domain ("*.example.com", not example.com itself), or an IP address
// ("192.168.1.5", "[2001:db8::1]"), each with an optional port
// ("app.example.com:8080"; ":*" or none for any port). Names are matched
// without case and without a trailing dot. The zero HostPattern matches
// nothing.
type HostPattern struct {
	name     string     // lower case, no trailing dot, no "*."
	wildcard bool       // any name under name
	addr     netip.Addr // an IP address pattern (name is "")
	port     string     // "" for any
}

// ParseHostPattern parses one --allowed-host value. Errors wrap
// ErrBadHostPattern and say what is wrong: a scheme or path, a "*" other
// than a leading "*.", a bare "*" (it would allow every host: list the
// names instead), a name that is not a DNS name, a port outside 1-65535.
func ParseHostPattern(s string) (HostPattern, error) {
	bad := func(why string) (HostPattern, error) {
		return HostPattern{}, fmt.Errorf("%w %q: %s", ErrBadHostPattern, echo(s), why)
	}
	switch {
	case s == "":
		return bad("empty")
	case strings.Contains(s, "://") || strings.ContainsAny(s, "/?#@"):
		return bad(`want a host with an optional port, such as "app.example.com:8080", without scheme, user or path`)
	case s == "*" || strings.HasPrefix(s, "*:"):
		return bad(`"*" would allow every host, which is what the check refuses; list the names, or "*.example.com" for a domain`)
	}
	host, port, err := splitHostPort(s)
	if err != nil {
		return bad(err.Error())
	}
	var p HostPattern
	if port != "" && port != "*" {
		n, err := strconv.ParseUint(port, 10, 16)
		if err != nil || n == 0 || port[0] == '0' {
			return bad("the port must be a number from 1 to 65535, or *")
		}
		p.port = port
	}
	if a, err := netip.ParseAddr(host); err == nil {
		if a.Zone() != "" {
			return bad("an address with a zone cannot be a Host")
		}
		p.addr = a.Unmap()
		return p, nil
	}
	if strings.Contains(host, ":") {
		return bad("an IPv6 address goes in brackets when it has a port, such as \"[2001:db8::1]:8080\"")
	}
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if rest, ok := strings.CutPrefix(host, "*."); ok {
		p.wildcard, host = true, rest
	}
	if strings.Contains(host, "*") {
		return bad(`"*" may only begin a pattern, as in "*.example.com"`)
	}
	if a, err := netip.ParseAddr(host); err == nil && !p.wildcard {
		// "1.2.3.4." is the address with a root dot, as a name would be.
		p.addr = a
		return p, nil
	}
	if !validName(host) {
		return bad("not a host name: labels of letters, digits, '-' and '_', separated by dots, at most 253 bytes")
	}
	p.name = host
	return p, nil
}

// ParseHostPatterns parses each of list (see ParseHostPattern); the first
// error is returned.
func ParseHostPatterns(list []string) ([]HostPattern, error) {
	out := make([]HostPattern, 0, len(list))
	for _, s := range list {
		p, err := ParseHostPattern(s)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

// String returns the pattern in the form ParseHostPattern reads.
func (p HostPattern) String() string {
	var h string
	switch {
	case p.addr.Is6():
		h = "[" + p.addr.String() + "]"
	case p.addr.IsValid():
		h = p.addr.String()
	case p.wildcard:
		h = "*." + p.name
	default:
		h = p.name
	}
	if p.port != "" {
		h += ":" + p.port
	}
	return h
}

// Match reports whether host, a Request.Host ("name", "name:port",
// "1.2.3.4:80", "[::1]:8080"), matches the pattern.
func (p HostPattern) Match(host string) bool {
	h, port, err := splitHostPort(host)
	if err != nil || (p.port != "" && p.port != port) {
		return false
	}
	if p.addr.IsValid() {
		a, err := netip.ParseAddr(strings.TrimSuffix(h, "."))
		return err == nil && a.Zone() == "" && a.Unmap() == p.addr
	}
	if p.name == "" {
		return false
	}
	h = strings.TrimSuffix(strings.ToLower(h), ".")
	if p.wildcard {
		return len(h) > len(p.name)+1 && strings.HasSuffix(h, p.name) && h[len(h)-len(p.name)-1] == '.'
	}
	return h == p.name
}

// IsLoopbackHost reports whether host, a Request.Host, names this machine
// in a way no DNS answer can change: "localhost" or a name under it (RFC
// 6761), or a loopback address (127.0.0.0/8, ::1), with any port.
func IsLoopbackHost(host string) bool {
	h, _, err := splitHostPort(host)
	if err != nil {
		return false
	}
	h = strings.TrimSuffix(strings.ToLower(h), ".")
	if h == "localhost" || strings.HasSuffix(h, ".localhost") && validName(h) {
		return true
	}
	a, err := netip.ParseAddr(h)
	return err == nil && a.Unmap().IsLoopback()
}

// HostAllowed reports whether a request with Host host passes HostCheck
// with allowed: a loopback host, or one matching a pattern.
func HostAllowed(allowed []HostPattern, host string) bool {
	if IsLoopbackHost(host) {
		return true
	}
	for _, p := range allowed {
		if p.Match(host) {
			return true
		}
	}
	return false
}

// HostCheck returns a handler that serves a request with next only when
// its Host is a loopback name or address or matches one of allowed (see
// HostAllowed); any other request, a request without Host included, gets
// 403 {"code":403,"error":"..."} before next sees it. Put it outermost,
// in front of CORS and authentication, on every handler of a server that
// runs without auth (and on one with auth when the operator lists hosts).
func HostCheck(allowed []HostPattern, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if HostAllowed(allowed, r.Host) {
			next.ServeHTTP(w, r)
			return
		}
		h, _, _ := splitHostPort(r.Host)
		if h == "" {
			h = "name"
		}
		apierror.New(apierror.Forbidden, "host %q is not allowed: this server answers only loopback hosts (localhost, 127.0.0.1, [::1]) and those listed with --allowed-host; if %q is this server's name, add --allowed-host %s", echo(r.Host), echo(h), echo(h)).WriteHTTP(w)
	})
}

// splitHostPort splits a Host header, or a pattern, into host and port
// ("" when there is none). An IPv6 address is in brackets when a port
// follows; one without brackets is the whole host.
func splitHostPort(s string) (host, port string, err error) {
	if s == "" {
		return "", "", errors.New("empty")
	}
	if rest, ok := strings.CutPrefix(s, "["); ok {
		end := strings.IndexByte(rest, ']')
		if end < 0 {
			return "", "", errors.New(`"[" without "]"`)
		}
		host, rest = rest[:end], rest[end+1:]
		if _, err := netip.ParseAddr(host); err != nil || !strings.Contains(host, ":") {
			return "", "", errors.New("not an IPv6 address in brackets")
		}
		if rest == "" {
			return host, "", nil
		}
		if port, ok = strings.CutPrefix(rest, ":"); !ok || port == "" {
			return "", "", errors.New(`want ":port" after "]"`)
		}
		return host, port, nil
	}
	switch strings.Count(s, ":") {
	case 0:
		return s, "", nil
	case 1:
		host, port, _ = strings.Cut(s, ":")
		if host == "" || port == "" {
			return "", "", errors.New("a host and a port around \":\"")
		}
		return host, port, nil
	}
	return s, "", nil // an IPv6 address without brackets and port
}

// validName reports whether s is a DNS name: dot-separated labels of
// letters, digits, '-' and '_', each 1 to 63 bytes, at most 253 in all.
func validName(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	for label := range strings.SplitSeq(s, ".") {
		if label == "" || len(label) > 63 {
			return false
		}
		for i := 0; i < len(label); i++ {
			switch c := label[i]; {
			case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '_':
			default:
				return false
			}
		}
	}
	return true
}
