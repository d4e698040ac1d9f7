package chat

import (
	"fmt"
	"sync"

	"github.com/forever-agents/forever/internal/apierror"
)

// ErrOverloaded (unavailable, 503) is returned by Send, ContinueLastTurn
// and Answer when the process already runs its TurnLimiter's maximum of
// turns: the new turn is refused at once, before anything is appended,
// rather than slowing every turn down. Retry later.
var ErrOverloaded error = apierror.Declare("chat", apierror.Unavailable, "too many turns running on this node, retry later")

// TurnLimiter bounds the turns that run at once in one process, across
// its agents (Config.Turns). New turns past the bound are refused with
// ErrOverloaded; recovered turns are always admitted (they were admitted
// before the crash and must complete), so they may take the count past the
// bound for a while. A nil *TurnLimiter admits everything.
type TurnLimiter struct {
	max     int
	parent  *TurnLimiter // Sub's: also holds a slot of it
	refusal error        // returned past max; nil: ErrOverloaded
	mu      sync.Mutex
	n       int
}

// NewTurnLimiter returns a limiter of max turns; max <= 0 admits
// everything.
func NewTurnLimiter(max int) *TurnLimiter { return &TurnLimiter{max: max} }

// Sub returns a limiter of max turns (max <= 0: no bound of its own) whose
// turns also hold a slot of l: a turn is admitted when both have room.
// Past its own bound it refuses with refusal (ErrOverloaded when nil);
// past l's, with l's error. One process serving several tenants gives
// each a Sub of one node-wide limiter, so the node's bound holds across
// them and a tenant's own bound says so (a quota, 429) apart from the
// node's (503).
func (l *TurnLimiter) Sub(max int, refusal error) *TurnLimiter {
	return &TurnLimiter{max: max, parent: l, refusal: refusal}
}

// Running returns the turns running now.
func (l *TurnLimiter) Running() int {
	if l == nil {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.n
}

// acquire admits one turn; force admits it past the bound.
func (l *TurnLimiter) acquire(force bool) error {
	if l == nil {
		return nil
	}
	l.mu.Lock()
	if !force && l.max > 0 && l.n >= l.max {
		n := l.n
		l.mu.Unlock()
		if l.refusal != nil {
			return l.refusal
		}
		return fmt.Errorf("%w (%d running, the limit is %d)", ErrOverloaded, n, l.max)
	}
	l.n++
	l.mu.Unlock()
	if err := l.parent.acquire(force); err != nil {
		l.mu.Lock()
		l.n--
		l.mu.Unlock()
		return err
	}
	return nil
}

func (l *TurnLimiter) release() {
	if l == nil {
		return
	}
	l.mu.Lock()
	l.n--
	l.mu.Unlock()
	l.parent.release()
}
