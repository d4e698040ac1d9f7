package agentd

import (
	"strings"
	"testing"
)

// FuzzFrameAncestor: a --frame-ancestors value either is refused with a
// reason or normalises to one CSP source expression that cannot break out
// of the header: http(s)://, then only host, port and "*." characters.
func FuzzFrameAncestor(f *testing.F) {
	for _, s := range []string{"https://portal.example.com", "https://*.example.com:*", "http://10.0.0.5:8080/",
		"portal.example.com", "https://a.example;script-src *", "https://*", "https://a.example:0", "HTTPS://A.Example", "https://a b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		norm, why := frameAncestor(s)
		if why != "" {
			if norm != "" {
				t.Fatalf("%q refused (%s) yet normalised to %q", s, why, norm)
			}
			return
		}
		rest, ok := strings.CutPrefix(norm, "https://")
		if !ok {
			rest, ok = strings.CutPrefix(norm, "http://")
		}
		if !ok || rest == "" {
			t.Fatalf("%q normalised to %q, not an http(s) origin", s, norm)
		}
		if strings.Contains(strings.TrimPrefix(rest, "*."), "*") && !strings.HasSuffix(rest, ":*") {
			t.Fatalf("%q normalised to %q: a * inside the host", s, norm)
		}
		for _, r := range rest {
			if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || strings.ContainsRune(".-:*", r)) {
				t.Fatalf("%q normalised to %q, with %q in the header", s, norm, r)
			}
		}
		if again, why := frameAncestor(norm); why != "" || again != norm {
			t.Fatalf("%q normalised to %q, which normalises to %q (%s)", s, norm, again, why)
		}
	})
}
