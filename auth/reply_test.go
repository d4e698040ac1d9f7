package auth

import (
	"errors"
	"strings"
	"testing"
)

func TestCheckReply(t *testing.T) {
	for _, tc := range []struct {
		name  string
		reply string
		ok    bool
	}{
		{"inbox", "_INBOX.abc", true},
		{"muxed inbox", "_INBOX.abc.def", true},
		{"empty", "", false},
		{"prefix only", "_INBOX.", false},
		{"no dot", "_INBOX", false},
		{"event stream", "forever.evt.chat:a", false},
		{"chunk stream", "forever.chunk.chat:a.s1", false},
		{"epoch key", "$KV.FOREVER_PARTITIONS.epoch.3", false},
		{"lease key", "$KV.FOREVER_LEASES.lease.3", false},
		{"inbox then stream", "_INBOX..forever.evt.a", false},
		{"wildcard", "_INBOX.*", false},
		{"full wildcard", "_INBOX.a.>", false},
		{"space", "_INBOX.a b", false},
		{"lower case", "_inbox.a", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckReply(tc.reply)
			if got := err == nil; got != tc.ok {
				t.Fatalf("CheckReply(%q) = %v, want ok %v", tc.reply, err, tc.ok)
			}
			if err != nil && !errors.Is(err, ErrReplySubject) {
				t.Fatalf("CheckReply(%q) = %v, does not wrap ErrReplySubject", tc.reply, err)
			}
		})
	}
}

// FuzzCheckReply: a reply subject admitted is under InboxPrefix, with
// tokens that are neither empty nor wildcards; every refusal wraps
// ErrReplySubject and quotes at most a bounded part of the subject.
func FuzzCheckReply(f *testing.F) {
	for _, s := range []string{"_INBOX.abc", "_INBOX.a.b", "", "_INBOX.", "forever.evt.a", "$KV.FOREVER_PARTITIONS.epoch.1", "_INBOX.*", "_INBOX.a..b", "_INBOX.a\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, reply string) {
		err := CheckReply(reply)
		if err != nil {
			if !errors.Is(err, ErrReplySubject) {
				t.Fatalf("CheckReply(%q): %v does not wrap ErrReplySubject", reply, err)
			}
			if len(err.Error()) > 4*maxReplyQuote+200 {
				t.Fatalf("CheckReply(%q): error of %d bytes", reply, len(err.Error()))
			}
			return
		}
		rest, ok := strings.CutPrefix(reply, InboxPrefix)
		if !ok || rest == "" {
			t.Fatalf("CheckReply(%q) admitted a subject not under %s", reply, InboxPrefix)
		}
		for _, tok := range strings.Split(rest, ".") {
			if tok == "" || tok == "*" || tok == ">" || strings.ContainsAny(tok, " \t\r\n") {
				t.Fatalf("CheckReply(%q) admitted token %q", reply, tok)
			}
		}
	})
}
