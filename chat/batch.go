package chat

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Merge and debounce (MultitaskMerge, MultitaskDebounce) build on the
// enqueue queue: each message is stored at once in its own queue fiber's
// fiber.started, as an enqueued one is, with three more fields of its
// turnStarted snapshot. The batch's first message (its head) names itself
// in Batch and carries the quiet window (Window); a message that joins
// the batch names the head's request in Batch. Every message carries when
// it was queued (QueuedAt).
//
// The head's queue fiber starts the batch's turn when the head is first
// in the queue, no turn runs, and no message joined for Window: its
// turn.started carries the head's message and, in Merged, every joined
// message in the order they came, with MergedFrom their queued request
// ids. That one event stores the messages, the turn, and takes them all
// out of the queue, so each message is answered by exactly one turn: the
// batch's, or, for a joined message its batch's turn did not take, its
// own (the joined message's fiber starts it as an enqueued turn).
//
// Joining and starting both hold the agent's enqueue lock (a command runs
// on its owner only), so a message joins a batch only before its turn
// starts; the fallback above covers the rest.

// DefaultDebounceWindow is Config.DebounceWindow's default.
const DefaultDebounceWindow = 400 * time.Millisecond

// MaxDebounceWindow bounds SendRequest.Debounce.
const MaxDebounceWindow = time.Minute

// joinedPoll is how often a message that joined a batch looks whether its
// batch's turn took it, when not woken: it has something to do only when
// that turn started without it, which is rare.
const joinedPoll = 5 * queuePoll

// maxMerged bounds the messages one batch's turn answers; the rest of a
// larger batch, and what would not fit in one turn.started, get turns of
// their own.
const maxMerged = 100

// debounceWindow is the quiet window of req's batch.
func (c *commands) debounceWindow(req SendRequest) time.Duration {
	a := c.a
	if req.Debounce > 0 {
		return req.Debounce
	}
	return a.cfg.DebounceWindow
}

// checkDebounce refuses a window out of bounds.
func checkDebounce(d time.Duration) error {
	if d < 0 || d > MaxDebounceWindow {
		return fmt.Errorf("%w: debounce window %s is outside 0 to %s", ErrMultitask, d, MaxDebounceWindow)
	}
	return nil
}

// sendBatched queues msg in the agent's open batch (the last queued
// message's, if its turn has not started), else in a new batch whose quiet
// window is window. With no window, an idle agent and nothing queued, the
// message starts its turn at once.
func (c *commands) sendBatched(ctx context.Context, req SendRequest, msg Message, window time.Duration) (Turn, error) {
	a := c.a
	a.mt.enqueue.Lock()
	defer a.mt.enqueue.Unlock()
	if turn, done, err := a.startOrFind(ctx, req, msg, window == 0); done {
		return turn, err
	}
	q, err := a.store.Queue(a.agent)
	if err != nil {
		return Turn{}, err
	}
	t := queuedTurn(req, msg)
	t.QueuedAt = a.cfg.Clock.Now().UnixMilli()
	reply := Turn{RequestID: t.RequestID, StreamID: t.StreamID, MessageID: t.AssistantMessageID}
	if head, ok := openBatch(q); ok {
		t.Batch = head.RequestID
		reply = Turn{RequestID: head.RequestID, StreamID: head.StreamID, MessageID: head.AssistantMessageID}
	} else {
		t.Batch = t.RequestID
		t.Window = window.Milliseconds()
		if t.Window == 0 && window > 0 {
			t.Window = 1
		}
	}
	if err := a.queue(ctx, t); err != nil {
		return Turn{}, err
	}
	return reply, nil
}

// openBatch returns the head of the batch a message joins: the last queued
// message's batch, while its head waits in the queue.
func openBatch(q []turnStarted) (turnStarted, bool) {
	if len(q) == 0 || q[len(q)-1].Batch == "" {
		return turnStarted{}, false
	}
	return findQueued(q, q[len(q)-1].Batch)
}

func findQueued(q []turnStarted, req string) (turnStarted, bool) {
	for _, t := range q {
		if t.RequestID == req {
			return t, true
		}
	}
	return turnStarted{}, false
}

// joined reports whether t is a message that joined another's batch.
func (t turnStarted) joined() bool { return t.Batch != "" && t.Batch != t.RequestID }

// joinedDone reports whether the joined message t needs no turn of its
// own: its message is stored (its batch's turn took it), or its batch's
// head still waits in the queue (wait). Otherwise the batch's turn started
// without it, or never will: it starts its own.
func (c *commands) joinedDone(t turnStarted) (done, wait bool, err error) {
	a := c.a
	if _, err := a.store.Message(a.agent, t.MessageID); err == nil {
		return true, false, nil
	} else if !errors.Is(err, ErrNotFound) {
		return false, false, err
	}
	q, err := a.store.Queue(a.agent)
	if err != nil {
		return false, false, err
	}
	_, queued := findQueued(q, t.Batch)
	return false, queued, nil
}

// startBatch starts the turn of the batch whose head is t, once its quiet
// window has passed since its last message came (else wait is what is
// left of it). Called with t first in the queue and no turn running.
func (c *commands) startBatch(ctx context.Context, t turnStarted) (wait time.Duration, err error) {
	a := c.a
	a.mt.enqueue.Lock()
	defer a.mt.enqueue.Unlock()
	if err := a.catchUp(ctx); err != nil {
		return 0, err
	}
	q, err := a.store.Queue(a.agent)
	if err != nil {
		return 0, err
	}
	last := t.QueuedAt
	var members []turnStarted
	for _, m := range q {
		if m.joined() && m.Batch == t.RequestID && m.Message != nil {
			members = append(members, m)
			last = max(last, m.QueuedAt)
		}
	}
	if left := time.UnixMilli(last + t.Window).Sub(a.cfg.Clock.Now()); t.Window > 0 && left > 0 {
		return left, nil
	}
	limit := maxMerged
	if a.maxMerged > 0 {
		limit = a.maxMerged
	}
	for _, m := range members {
		if len(t.Merged) == limit {
			break
		}
		msg := *m.Message
		msg.RequestID = t.RequestID
		next := t
		next.Merged = append(append([]Message(nil), t.Merged...), msg)
		next.MergedFrom = append(append([]string(nil), t.MergedFrom...), m.RequestID)
		if _, err := a.event(EventTurnStarted, next); err != nil {
			break // the rest get turns of their own
		}
		t = next
	}
	msg := *t.Message
	_, err = a.start(ctx, t, &msg, nil, "")
	return 0, err
}
