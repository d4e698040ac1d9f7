package chat

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"

	"github.com/forever-agents/forever/eventlog"
)

// turnSteered is the data of turn.steered.
type turnSteered struct {
	RequestID string   `json:"requestId"`
	Message   *Message `json:"message"`
}

// steerEventID is the event id of the turn.steered of message msgID: the
// same for every copy of the command.
func steerEventID(agent, msgID string) string {
	h := sha256.Sum256([]byte(agent + "\x00steer\x00" + msgID))
	return "steer-" + hex.EncodeToString(h[:16])
}

// sendSteering adds msg to the running turn, which reads it at its next
// model call (after the current step's tool calls finish), or, when the
// answer it streams is its last, in one more step. A turn that cannot take
// it any more (no turn streams in this process, or it is recording its
// end) makes it an enqueued message: its own turn, next.
func (c *commands) sendSteering(ctx context.Context, req SendRequest, msg Message) (Turn, error) {
	a := c.a
	a.mu.Lock()
	cur := a.mu.active
	open := cur != nil && !cur.pending && !cur.ending.Load()
	a.mu.Unlock()
	if !open || !a.mt.beginSteer(cur.requestID) {
		return a.sendQueued(ctx, req, msg)
	}
	info, err := a.store.Turn(a.agent, cur.requestID)
	if err != nil || !info.Active() {
		a.mt.endSteer(cur.requestID)
		return a.sendQueued(ctx, req, msg)
	}
	defer a.mt.endSteer(cur.requestID)
	msg.RequestID = info.RequestID
	e, err := a.event(EventTurnSteered, turnSteered{RequestID: info.RequestID, Message: &msg})
	if err != nil {
		return Turn{}, err
	}
	e.ID = steerEventID(a.agent, msg.ID)
	seq, err := a.log.Append(ctx, e)
	if err != nil {
		return Turn{}, fmt.Errorf("chat: append %s: %w", EventTurnSteered, err)
	}
	if err := a.store.WaitFor(ctx, seq); err != nil {
		return Turn{}, err
	}
	return turnOf(info), nil
}

// beginSteer counts a steering Send of turn req in flight, unless the
// turn has closed to steering (it is recording its end).
func (m *multitaskState) beginSteer(req string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed == req {
		return false
	}
	if m.steering == nil {
		m.steering = map[string]int{}
	}
	m.steering[req]++
	return true
}

// endSteer ends a beginSteer and wakes the turn if it waits.
func (m *multitaskState) endSteer(req string) {
	m.mu.Lock()
	if m.steering[req] > 0 {
		m.steering[req]--
		if m.steering[req] == 0 {
			delete(m.steering, req)
		}
	}
	m.mu.Unlock()
	m.notify()
}

// closeSteer closes turn req to steering, unless a steering Send is in
// flight (the turn then waits for it).
func (m *multitaskState) closeSteer(req string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.steering[req] > 0 {
		return false
	}
	m.closed = req
	return true
}

func (m *multitaskState) reopenSteer(req string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed == req {
		m.closed = ""
	}
}

// steerAgain is asked when the turn's answer is final: it closes the turn
// to steering and reports whether messages steered into it were not read
// by a model call yet, so the turn goes on with one more step (within
// MaxSteps).
func (st *turnRun) steerAgain(ctx context.Context) bool {
	a := st.a
	req := st.info.RequestID
	for {
		wake := a.mt.changed()
		if a.mt.closeSteer(req) {
			break
		}
		select {
		case <-wake:
		case <-ctx.Done():
			return false
		}
	}
	if st.b.steps >= a.cfg.MaxSteps {
		return false
	}
	// The turns view counts them: the conversation is read only when one
	// is unread.
	if info, err := a.store.Turn(a.agent, req); err != nil || info.Steered <= len(st.snap.Steered) {
		return false
	}
	history, err := a.store.History(a.agent)
	if err != nil {
		a.logger.Warn("read steered messages", "request", req, "err", err)
		return false
	}
	for _, m := range history {
		if steeredInto(st, m) && !slices.Contains(st.snap.Steered, m.ID) {
			a.mt.reopenSteer(req)
			return true
		}
	}
	return false
}

// steeredInto reports whether m was steered into st's turn.
func steeredInto(st *turnRun, m Message) bool {
	return m.Role == RoleUser && m.RequestID == st.info.RequestID && m.ID != st.info.MessageID && !slices.Contains(st.info.Merged, m.ID)
}

// steeredLast moves the messages steered into st's turn after the turn's
// earlier steps (they came while those ran), and notes them read. A call
// continuing a step cut short (resume) takes only those read before. rest
// is msgs filtered in place (the whole conversation, before every model
// call): msgs is not to be used after.
func steeredLast(st *turnRun, msgs []Message, resume bool) (rest, steered []Message) {
	rest = msgs[:0]
	for _, m := range msgs {
		switch {
		case !steeredInto(st, m):
			rest = append(rest, m)
		case !resume || slices.Contains(st.snap.Steered, m.ID):
			steered = append(steered, m)
		}
	}
	for _, m := range steered {
		if !slices.Contains(st.snap.Steered, m.ID) {
			st.snap.Steered = append(st.snap.Steered, m.ID)
		}
	}
	return rest, steered
}

// applySteered counts a turn.steered in its turn's TurnInfo.
func applySteered(b *eventlog.Batch, e eventlog.Event) error {
	var ts turnSteered
	if !decodeData(e, &ts) || ts.RequestID == "" || ts.Message == nil {
		return nil
	}
	var t TurnInfo
	ok, err := getJSON(b, turnKey(e.Agent, ts.RequestID), &t)
	if err != nil || !ok {
		return err
	}
	t.Steered++
	return setJSON(b, turnKey(e.Agent, ts.RequestID), t)
}
