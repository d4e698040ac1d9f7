package host_test

import (
	"slices"
	"testing"

	"github.com/forever-agents/forever/agentd/chathost"
	"github.com/forever-agents/forever/agentd/demo"
	"github.com/forever-agents/forever/agentd/host"
	"github.com/forever-agents/forever/auth"
)

// TestEveryVerbHasAnAccessClass: every verb the host and the binary's
// agent types answer is in auth's verb table, which roles, quotas and the
// audit read; the reads of the table are the verbs a reader may send and
// the ones a quota does not count.
func TestEveryVerbHasAnAccessClass(t *testing.T) {
	var verbs []string
	for _, vs := range [][]string{host.Verbs, chathost.Verbs, demo.StepsVerbs} {
		verbs = append(verbs, vs...)
	}
	for _, v := range verbs {
		if !auth.Classified(v) {
			t.Errorf("verb %q has no access class in auth's verb table", v)
		}
	}
	for _, v := range auth.VerbsOf(auth.AccessRead) {
		if !slices.Contains(verbs, v) {
			t.Errorf("read verb %q of the table is no type's verb", v)
		}
		if !auth.RoleReader.Allows(v) || !auth.IsRead(v) {
			t.Errorf("read verb %q: reader allowed %v, IsRead %v", v, auth.RoleReader.Allows(v), auth.IsRead(v))
		}
	}
	for _, tc := range []struct {
		verb string
		want auth.Access
	}{
		{"tools", auth.AccessRead}, {"status", auth.AccessRead}, {"messages", auth.AccessRead},
		{"approve", auth.AccessApprove}, {"meta", auth.AccessWrite}, {"state", auth.AccessWrite},
		{"delete", auth.AccessAdmin}, {"an-embedders-verb", auth.AccessWrite},
	} {
		if got := auth.VerbAccess(tc.verb); got != tc.want {
			t.Errorf("VerbAccess(%q) = %s, want %s", tc.verb, got, tc.want)
		}
	}
}
