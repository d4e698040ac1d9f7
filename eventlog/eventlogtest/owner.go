package eventlogtest

import (
	"sync"

	"github.com/forever-agents/forever/eventlog"
)

// Owner is an eventlog.Owner whose grants a test sets, for a fenced Log
// (eventlog.Config.Owner) whose ownership is revoked mid-work. The zero
// value grants nothing. It is safe for concurrent use.
type Owner struct {
	mu    sync.Mutex
	grant map[string]eventlog.Token
	lapse map[string]int
}

// Token implements eventlog.Owner.
func (o *Owner) Token(agent string) (eventlog.Token, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.lapse[agent] > 0 {
		o.lapse[agent]--
		return eventlog.Token{}, false
	}
	t, ok := o.grant[agent]
	return t, ok
}

// Grant makes tok the agent's token.
func (o *Owner) Grant(agent string, tok eventlog.Token) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.grant == nil {
		o.grant = map[string]eventlog.Token{}
	}
	o.grant[agent] = tok
}

// Revoke takes the agent away: appends to it fail with ErrNotOwner.
func (o *Owner) Revoke(agent string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.grant, agent)
}

// Lapse makes the next n Token calls for agent answer that it is not
// owned, and the later ones grant it again: a node whose lease lapsed for
// a moment (a late renewal) and came back.
func (o *Owner) Lapse(agent string, n int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.lapse == nil {
		o.lapse = map[string]int{}
	}
	o.lapse[agent] = n
}

var _ eventlog.Owner = (*Owner)(nil)
