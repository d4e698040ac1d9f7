package chat

import (
	"fmt"
	"net/http"
	"sync"
)

// ErrOverloaded (unavailable, 503) is returned by Send, ContinueLastTurn
// and Answer when the process already runs its TurnLimiter's maximum of
// turns: the new turn is refused at once, before anything is appended,
// rather than slowing every turn down. Retry later.
var ErrOverloaded error = &statusError{msg: "chat: too many turns running on this node, retry later", code: http.StatusServiceUnavailable}

// TurnLimiter bounds the turns that run at once in one process, across
// its agents (Config.Turns). New turns past the bound are refused with
// ErrOverloaded; recovered turns are always admitted (they were admitted
// before the crash and must complete), so they may take the count past the
// bound for a while. A nil *TurnLimiter admits everything.
type TurnLimiter struct {
	max int
	mu  sync.Mutex
	n   int
}

// NewTurnLimiter returns a limiter of max turns; max <= 0 admits
// everything.
func NewTurnLimiter(max int) *TurnLimiter { return &TurnLimiter{max: max} }

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
	defer l.mu.Unlock()
	if !force && l.max > 0 && l.n >= l.max {
		return fmt.Errorf("%w (%d running, the limit is %d)", ErrOverloaded, l.n, l.max)
	}
	l.n++
	return nil
}

func (l *TurnLimiter) release() {
	if l == nil {
		return
	}
	l.mu.Lock()
	l.n--
	l.mu.Unlock()
}
