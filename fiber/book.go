package fiber

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
)

// book is the Runner's bookkeeping: which fibers this Runner owns and in
// which state. Like raft's RawNode it is a deterministic state machine free
// of I/O: the Runner asks it what to do, persists the matching event, and
// only then acts. It is not safe for concurrent use.
// REQUIRES: Runner.mu held for every method.
type book struct {
	closed bool
	slots  map[string]*slot
	names  map[string]string // name of a live Unique fiber -> its id
}

// slotState is what a Runner is doing with a fiber it owns.
type slotState uint8

const (
	// slotRunning: the fiber's function runs (Run, Go, Resume, GoResume).
	slotRunning slotState = iota + 1
	// slotRecovering: Recover is calling the hook for this orphan.
	slotRecovering
)

// slot is one owned fiber.
type slot struct {
	state   slotState
	fiber   *Fiber // set while running
	resumed bool   // set when a recovering slot was resumed by the hook
	name    string // set while it holds names[name] (a Unique fiber)
}

func newBook() book { return book{slots: map[string]*slot{}, names: map[string]string{}} }

// start claims id for a new or resumed run. A recovering slot (the hook
// resuming its fiber) turns into a running one. A Unique fiber also claims
// its name: ErrNameTaken while another live fiber holds it.
func (b *book) start(id string, f *Fiber) (*slot, error) {
	if b.closed {
		return nil, ErrStopped
	}
	if f.unique {
		if other, ok := b.names[f.name]; ok && other != id {
			return nil, fmt.Errorf("%w: fiber %s (%q) runs, %s may not start beside it", ErrNameTaken, other, f.name, id)
		}
	}
	s, ok := b.slots[id]
	switch {
	case !ok:
		s = &slot{}
		b.slots[id] = s
	case s.state == slotRecovering && !s.resumed:
		s.resumed = true
	default:
		return nil, ErrRunning
	}
	s.state, s.fiber = slotRunning, f
	if f.unique {
		b.names[f.name], s.name = id, f.name
	}
	return s, nil
}

// unname lets s's name go, if s holds it.
func (b *book) unname(id string, s *slot) {
	if s.name != "" && b.names[s.name] == id {
		delete(b.names, s.name)
	}
	s.name = ""
}

// claim marks the orphan id as being recovered. It reports false when the
// Runner owns id already (a live fiber or a recovery in progress) or is
// closed.
func (b *book) claim(id string) (*slot, bool) {
	if b.closed {
		return nil, false
	}
	if _, ok := b.slots[id]; ok {
		return nil, false
	}
	s := &slot{state: slotRecovering}
	b.slots[id] = s
	return s, true
}

// release drops s if it still holds id.
func (b *book) release(id string, s *slot) {
	b.unname(id, s)
	if b.slots[id] == s {
		delete(b.slots, id)
	}
}

// abort undoes a start whose fiber never ran: a resumed recovering slot
// goes back to recovering, a new one is dropped.
func (b *book) abort(id string, s *slot) {
	b.unname(id, s)
	if s.resumed {
		s.state, s.fiber, s.resumed = slotRecovering, nil, false
		return
	}
	b.release(id, s)
}

// resumedBy reports whether the hook resumed the fiber of recovering slot s.
func (b *book) resumedBy(s *slot) bool { return s.resumed }

// settle ends a recovery attempt: it reports whether the hook resumed the
// fiber (then the running fiber owns the slot); otherwise the slot is
// dropped.
func (b *book) settle(id string, s *slot) (resumed bool) {
	if s.resumed {
		return true
	}
	b.release(id, s)
	return false
}

// close stops new starts and claims.
func (b *book) close() { b.closed = true }

// nextAttempt decides an orphan's next recovery attempt from the last one
// recorded (0 when none): the attempt to record with fiber.recovered, or
// abandon once max attempts are used up.
func nextAttempt(last, max int) (attempt int, abandon bool) {
	if last >= max {
		return last, true
	}
	return last + 1, false
}

// stepAction is what Step does for one op.
type stepAction uint8

const (
	stepRun       stepAction = iota + 1 // new op: record op.started, run, record op.completed
	stepCached                          // completed earlier: return the stored result
	stepRerun                           // started but not completed: run again with the same op ID
	stepAmbiguous                       // started but not completed, unsafe: ErrMaybeExecuted
)

// decideStep chooses the action for an op given what is recorded for it
// (nil when nothing is).
func decideStep(op *Op, unsafe bool) stepAction {
	switch {
	case op == nil:
		return stepRun
	case op.Completed:
		return stepCached
	case unsafe:
		return stepAmbiguous
	default:
		return stepRerun
	}
}

// opID derives a step's op ID from the fiber, the step key and the step's
// position: the n-th call (from 1) of Step with that key in this run of the
// fiber. The same fiber running the same steps in the same order after a
// recovery gets the same IDs.
func opID(fiberID, key string, n int) string {
	h := sha256.Sum256([]byte(fiberID + "\x00" + key + "\x00" + strconv.Itoa(n)))
	return hex.EncodeToString(h[:16])
}
