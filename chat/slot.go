package chat

import "sync"

// slotHold is the bookkeeping of one hold of the agent's turn slot (the
// activeTurn that Agent.mu.active points at). Whoever holds the slot gives
// it back once: release it, or keep it on purpose. A turn.started whose
// append's fate is unknown keeps the slot until the agent restarts, so
// that nothing starts beside a turn that may yet land (see Agent.start).
//
// The hold is checked: a second release is a no-op that is reported, and
// a hold its owner ends without releasing or keeping (Agent.checkSlot) is
// reported and released. Reports go to Agent.slotMisuse.
type slotHold struct {
	mu    sync.Mutex
	state holdState
	why   string // why it was kept
}

type holdState uint8

const (
	holdHeld holdState = iota
	holdKept
	holdReleased
)

// release marks the hold released and reports whether this call did; a
// second call changes nothing and reports false.
func (h *slotHold) release() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.state == holdReleased {
		return false
	}
	h.state = holdReleased
	return true
}

// keep marks a held slot kept on purpose, for why: it stays taken after
// its owner ends. A released hold stays released.
func (h *slotHold) keep(why string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.state == holdHeld {
		h.state, h.why = holdKept, why
	}
}

// held reports whether the hold is neither released nor kept.
func (h *slotHold) held() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.state == holdHeld
}

// checkSlot is called by an owner of at's slot as it ends (a turn's
// fiber, a recovery): a hold neither released nor kept is a missing
// release, reported and then released, so the agent is not blocked for
// good by a path that forgot it.
func (a *Agent) checkSlot(at *activeTurn, owner string) {
	if at == nil || !at.hold.held() {
		return
	}
	a.slotMisuse(at, "not released by "+owner)
	a.release(at)
}

// keepSlot keeps at's slot taken after its owner ends, for why.
func (a *Agent) keepSlot(at *activeTurn, why string) { at.hold.keep(why) }

// slotMisuse reports a turn slot released twice, or not released by its
// owner: a defect of this package, logged, and handed to the test hook.
func (a *Agent) slotMisuse(at *activeTurn, what string) {
	a.logger.Error("chat: turn slot misused", "request", at.requestID, "misuse", what)
	if a.onSlotMisuse != nil {
		a.onSlotMisuse(at.requestID, what)
	}
}
