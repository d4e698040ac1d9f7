package host

import (
	"errors"
	"strings"
	"testing"
)

// FuzzCommandSubject: any subject a request arrives on gives an agent and a
// verb, the last two tokens, or an error wrapping ErrBadRequest.
func FuzzCommandSubject(f *testing.F) {
	for _, s := range []string{"forever.cmd.a1.chat", "p.q.cmd.a1.status", "forever.cmd.a1", "", "....", "forever.cmd..chat"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, subject string) {
		agent, verb, err := commandSubject(subject)
		if err != nil {
			if !errors.Is(err, ErrBadRequest) {
				t.Fatalf("commandSubject(%q): %v does not wrap ErrBadRequest", subject, err)
			}
			return
		}
		if !strings.HasSuffix(subject, "."+agent+"."+verb) || strings.Contains(agent, ".") || strings.Contains(verb, ".") {
			t.Fatalf("commandSubject(%q) = %q, %q", subject, agent, verb)
		}
	})
}
