package chat

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/forever-agents/forever/fiber"
	"github.com/forever-agents/forever/internal/apierror"
	"github.com/nats-io/nuid"
)

// Multitask is what Send does with a message that arrives while a turn of
// the agent runs (double texting): SendRequest.Multitask, else
// Config.Multitask, else MultitaskReject.
type Multitask string

// The multitask policies.
const (
	// MultitaskReject refuses the message with ErrTurnActive (409), also
	// while messages wait in the agent's queue (enqueue): nothing is
	// stored. The default.
	MultitaskReject Multitask = "reject"
	// MultitaskInterrupt ends the running turn as Cancel does (an abort
	// chunk, its partial answer kept, turn.interrupted) and starts a turn
	// answering the message. It goes before messages waiting in the queue.
	MultitaskInterrupt Multitask = "interrupt"
	// MultitaskEnqueue stores the message at once, in a queue fiber's
	// fiber.started, and answers it in its own turn after the running turn
	// and the messages queued before it, in order. The reply names its
	// request, stream and assistant message as for a turn started at once
	// (cursor 0: follow the stream from its first chunk). The queue is the
	// log's: a crash or an ownership move recovers the queue fibers, which
	// start the queued turns in order.
	MultitaskEnqueue Multitask = "enqueue"
	// MultitaskSteer adds the message to the running turn's context at its
	// next model call, after the current tool calls finish (steer.go): the
	// turn goes on in the same stream, and the reply names it. When the
	// turn's answer was its last, it makes one more step (within
	// Config.MaxSteps) to read the message. A message that comes when no
	// turn streams, or as the turn records its end, is enqueued.
	MultitaskSteer Multitask = "steer"
	// MultitaskRollback ends the running turn as MultitaskInterrupt does,
	// then removes it from the conversation (its user message and all
	// after it: its partial answer, messages steered into it), and starts
	// a turn answering the message (rollback.go). The turn's events and
	// stream stay in the log; only the conversation forgets it.
	MultitaskRollback Multitask = "rollback"
	// MultitaskMerge stores the message at once, as MultitaskEnqueue does,
	// and answers every message that came while the running turn ran (or
	// while the batch waited) in one next turn, whose input holds them all
	// in the order they came (batch.go). The reply names that turn. With
	// no turn running and nothing queued, the message starts its turn at
	// once.
	MultitaskMerge Multitask = "merge"
	// MultitaskDebounce is MultitaskMerge whose turn starts only after a
	// quiet window (Config.DebounceWindow, or SendRequest.Debounce) in
	// which no message joined the batch, also when no turn runs: messages
	// sent within the window become one turn.
	MultitaskDebounce Multitask = "debounce"
)

// Multitasks are the supported policies, in the order the docs list them.
var Multitasks = []Multitask{MultitaskReject, MultitaskInterrupt, MultitaskEnqueue, MultitaskSteer, MultitaskRollback, MultitaskMerge, MultitaskDebounce}

// ErrMultitask (bad input) is returned by Send and Config.Validate for a
// multitask policy that is not one of Multitasks.
var ErrMultitask error = apierror.Declare("chat", apierror.BadRequest, "unsupported multitask policy")

// QueueFiberPrefix starts the name of the fiber that holds a queued
// message (MultitaskEnqueue): QueueFiberPrefix+requestId. Its fiber.started
// carries the queued turn's turn.started as its snapshot.
const QueueFiberPrefix = "__chat_queue:"

// ParseMultitask returns the policy named s ("" is "", the agent's
// default).
func ParseMultitask(s string) (Multitask, error) {
	m := Multitask(s)
	if m == "" || isMultitask(m) {
		return m, nil
	}
	names := make([]string, len(Multitasks))
	for i, p := range Multitasks {
		names[i] = string(p)
	}
	supported := strings.Join(names, ", ")
	return "", fmt.Errorf("%w: %q is not a multitask policy; use one of %s", ErrMultitask, s, supported)
}

func isMultitask(m Multitask) bool {
	for _, p := range Multitasks {
		if m == p {
			return true
		}
	}
	return false
}

// multitaskState is an Agent's state for its policies.
type multitaskState struct {
	mu   sync.Mutex
	wake chan struct{} // closed, and replaced, when the turn slot frees
	// priority counts the Sends that interrupt: queued messages wait for
	// them.
	priority atomic.Int32
	// enqueue serializes enqueueing Sends of the agent (a command runs on
	// its owner only): a retried command finds its queued copy.
	enqueue sync.Mutex
	// steering counts the steering Sends in flight by turn; closed is the
	// turn that closed to steering (guarded by mu): steer.go.
	steering map[string]int
	closed   string
}

// changed returns a channel closed at the next notify.
func (m *multitaskState) changed() <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.wake == nil {
		m.wake = make(chan struct{})
	}
	return m.wake
}

// notify wakes the waiters of changed.
func (m *multitaskState) notify() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.wake != nil {
		close(m.wake)
		m.wake = nil
	}
}

// queuePoll is how often a waiting queued message or interrupting Send
// looks again without being woken: a turn recovered, or ended, without
// this process's slot (a turn waiting for recovery) wakes no one.
const queuePoll = 200 * time.Millisecond

// interruptWait bounds how long an interrupting Send waits for the turn
// it stopped to end.
const interruptWait = 30 * time.Second

// admit sends msg under req's multitask policy.
func (c *commands) admit(ctx context.Context, req SendRequest, msg Message) (Turn, error) {
	a := c.a
	if _, err := ParseMultitask(string(req.Multitask)); err != nil {
		return Turn{}, err
	}
	if err := checkDebounce(req.Debounce); err != nil {
		return Turn{}, err
	}
	policy := cmpOr(req.Multitask, a.cfg.Multitask, MultitaskReject)
	if orig, ok, err := a.queuedSend(msg.ID, req.RequestID); err != nil || ok {
		return orig, err
	}
	switch policy {
	case MultitaskInterrupt:
		return a.sendInterrupting(ctx, req, msg)
	case MultitaskEnqueue:
		return a.sendQueued(ctx, req, msg)
	case MultitaskSteer:
		return a.sendSteering(ctx, req, msg)
	case MultitaskRollback:
		return a.sendRollingBack(ctx, req, msg)
	case MultitaskMerge, MultitaskDebounce:
		if a.cfg.BatchesWritable != nil && !a.cfg.BatchesWritable() {
			// Not every node reads a batch yet: each message its own
			// turn, in order, as enqueue answers it.
			return a.sendQueued(ctx, req, msg)
		}
		if policy == MultitaskMerge {
			return a.sendBatched(ctx, req, msg, 0)
		}
		return a.sendBatched(ctx, req, msg, a.debounceWindow(req))
	}
	if n, err := a.waitingCount(); err != nil {
		return Turn{}, err
	} else if n > 0 {
		return Turn{}, fmt.Errorf("%w: %d messages wait in the agent's queue", ErrTurnActive, n)
	}
	return a.sendNow(ctx, req, msg)
}

func cmpOr(ms ...Multitask) Multitask {
	for _, m := range ms {
		if m != "" {
			return m
		}
	}
	return ""
}

// sendInterrupting stops the running turn, if any, and starts msg's turn
// once it has ended.
func (c *commands) sendInterrupting(ctx context.Context, req SendRequest, msg Message) (Turn, error) {
	a := c.a
	a.mt.priority.Add(1)
	defer func() {
		a.mt.priority.Add(-1)
		a.mt.notify()
	}()
	deadline := time.Now().Add(interruptWait)
	cancelled := map[string]bool{}
	for {
		wake := a.mt.changed()
		turn, err := a.sendNow(ctx, req, msg)
		if !errors.Is(err, ErrTurnActive) || time.Now().After(deadline) {
			return turn, err
		}
		// Stop the turn that runs, once.
		if id, ok, rerr := a.activeRequest(ctx); rerr != nil {
			return Turn{}, rerr
		} else if ok && !cancelled[id] {
			cancelled[id] = true
			if _, cerr := a.Cancel(ctx); cerr != nil {
				return Turn{}, cerr
			}
		}
		select {
		case <-wake:
		case <-time.After(queuePoll):
		case <-ctx.Done():
			return Turn{}, ctx.Err()
		}
	}
}

// activeRequest is the request id of the turn that holds the slot in this
// process, else of the turn the views show active (waiting for recovery).
func (c *commands) activeRequest(ctx context.Context) (string, bool, error) {
	a := c.a
	a.mu.Lock()
	cur := a.mu.active
	a.mu.Unlock()
	if cur != nil {
		return cur.requestID, true, nil
	}
	if err := a.catchUp(ctx); err != nil {
		return "", false, err
	}
	info, active, err := a.store.ActiveTurn(a.agent)
	return info.RequestID, active, err
}

// startOrFind begins a queued send, under the enqueue lock: with tryNow,
// an idle agent with nothing queued starts msg's turn at once; else, caught
// up, a copy of a message already sent or queued gets its turn back. done
// says the answer is given (turn, or err); else msg is to be queued.
func (c *commands) startOrFind(ctx context.Context, req SendRequest, msg Message, tryNow bool) (turn Turn, done bool, err error) {
	a := c.a
	if tryNow {
		n, err := a.waitingCount()
		if err != nil {
			return Turn{}, true, err
		}
		if n == 0 {
			turn, err := a.sendNow(ctx, req, msg)
			if !errors.Is(err, ErrTurnActive) {
				return turn, true, err
			}
		}
	}
	// Under the lock, caught up: the check that decides.
	if err := a.catchUp(ctx); err != nil {
		return Turn{}, true, err
	}
	if orig, ok, err := a.sent(msg.ID, req.RequestID); err != nil || ok {
		return orig, true, err
	}
	if orig, ok, err := a.queuedSend(msg.ID, req.RequestID); err != nil || ok {
		return orig, true, err
	}
	return Turn{}, false, nil
}

// sendQueued starts msg's turn at once when the agent is idle and nothing
// waits in its queue, and else queues it: a queue fiber, whose fiber.started
// carries the turn's turn.started, starts the turn in its order.
func (c *commands) sendQueued(ctx context.Context, req SendRequest, msg Message) (Turn, error) {
	a := c.a
	a.mt.enqueue.Lock()
	defer a.mt.enqueue.Unlock()
	if turn, done, err := a.startOrFind(ctx, req, msg, true); done {
		return turn, err
	}
	t := queuedTurn(req, msg)
	if err := a.queue(ctx, t); err != nil {
		return Turn{}, err
	}
	return Turn{RequestID: t.RequestID, StreamID: t.StreamID, MessageID: t.AssistantMessageID}, nil
}

// queuedTurn is the turn.started of a queued message.
func queuedTurn(req SendRequest, msg Message) turnStarted {
	t := turnStarted{
		RequestID: req.RequestID, StreamID: nuid.Next(), MessageID: msg.ID,
		AssistantMessageID: nuid.Next(), Body: req.Body, Tools: req.Tools, Parent: req.Parent,
	}
	if t.RequestID == "" {
		t.RequestID = nuid.Next()
	}
	msg.RequestID = t.RequestID
	t.Message = &msg
	return t
}

// queue stores t in a queue fiber's fiber.started and waits for the views
// to show it queued.
func (c *commands) queue(ctx context.Context, t turnStarted) error {
	a := c.a
	// Too large for its turn.started is refused now, not when it runs.
	if _, err := a.event(EventTurnStarted, t); err != nil {
		return err
	}
	if _, err := a.cfg.Fibers.Go(ctx, QueueFiberPrefix+t.RequestID, func(fctx context.Context, _ *fiber.Fiber) error {
		return a.runQueued(fctx, t)
	}, fiber.WithSnapshot(t)); err != nil {
		return fmt.Errorf("chat: queue the message: %w", err)
	}
	return a.catchUp(ctx)
}

// runQueued is a queue fiber: it starts the queued turn t once t is the
// first of the agent's queue, no turn runs and no interrupting Send waits.
// It ends once t's turn is stored (by it or by an earlier run of it).
func (c *commands) runQueued(ctx context.Context, t turnStarted) error {
	a := c.a
	for {
		wake := a.mt.changed()
		done, wait, err := a.tryQueued(ctx, t)
		if done {
			return err
		}
		if err != nil && ctx.Err() == nil {
			a.logger.Warn("start a queued turn", "request", t.RequestID, "err", err)
		}
		if poll := queuePoll; wait <= 0 || wait > poll {
			if t.joined() {
				poll = joinedPoll
			}
			wait = poll
		}
		select {
		case <-wake:
		case <-time.After(wait):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// tryQueued starts t's turn if it is its time; done reports that the
// queue fiber has nothing left to do.
// A message of a merge or debounce batch (batch.go) that joined another's
// is done once its batch's turn took it, and starts a turn of its own, as
// an enqueued message does, if that turn started without it; wait is
// what is left of a batch's quiet window.
func (c *commands) tryQueued(ctx context.Context, t turnStarted) (done bool, wait time.Duration, err error) {
	a := c.a
	if err := a.catchUp(ctx); err != nil {
		return false, 0, err
	}
	if _, err := a.store.Turn(a.agent, t.RequestID); err == nil {
		return true, 0, nil // started (a run before a crash)
	} else if !errors.Is(err, ErrNotFound) {
		return false, 0, err
	}
	if t.joined() {
		done, waiting, err := a.joinedDone(t)
		if done || waiting || err != nil {
			return done, 0, err
		}
	}
	head, ok, err := a.store.queueHead(a.agent)
	if err != nil || (ok && head.RequestID != t.RequestID) {
		return false, 0, err
	}
	if a.mt.priority.Load() > 0 {
		return false, 0, nil
	}
	a.mu.Lock()
	busy := a.mu.active != nil
	a.mu.Unlock()
	if busy {
		return false, 0, nil
	}
	if t.Batch == t.RequestID {
		wait, err = a.startBatch(ctx, t)
		if wait > 0 && err == nil {
			return false, wait, nil
		}
	} else {
		msg := *t.Message
		_, err = a.start(ctx, t, &msg, nil, "")
	}
	switch {
	case err == nil:
		return true, 0, nil
	case errors.Is(err, ErrTurnActive), errors.Is(err, ErrOverloaded):
		return false, 0, nil
	case errors.Is(err, ErrDuplicateMessage), errors.Is(err, ErrInvalidMessage), errors.Is(err, ErrTooLarge):
		// It can never start (its message id was taken meanwhile): the
		// fiber ends and takes it out of the queue. Messages that joined
		// its batch then start turns of their own.
		a.logger.Error("queued message dropped", "request", t.RequestID, "message", t.MessageID, "err", err)
		return true, 0, nil
	}
	return false, 0, err
}

// recoverQueued resumes a queue fiber after a crash or an ownership move.
func (c *commands) recoverQueued(ctx context.Context, rec fiber.Recovered) error {
	a := c.a
	var t turnStarted
	if err := json.Unmarshal(rec.Snapshot, &t); err != nil || t.RequestID == "" || t.Message == nil {
		a.logger.Error("queue fiber without its message, ending it", "fiber", rec.ID, "err", err)
		return a.cfg.Fibers.GoResume(ctx, rec, func(context.Context, *fiber.Fiber) error { return nil })
	}
	return a.cfg.Fibers.GoResume(ctx, rec, func(fctx context.Context, _ *fiber.Fiber) error {
		return a.runQueued(fctx, t)
	})
}

// queuedSend returns the reply of the Send that queued message msgID (or
// request requestID), if it waits in the queue.
func (c *commands) queuedSend(msgID, requestID string) (Turn, bool, error) {
	a := c.a
	q, err := a.store.Queue(a.agent)
	if err != nil {
		return Turn{}, false, err
	}
	for _, t := range q {
		if t.MessageID == msgID || (requestID != "" && t.RequestID == requestID) {
			if t.MessageID != msgID {
				return Turn{}, false, fmt.Errorf("%w: request id %q is the turn of message %q, not %q", ErrDuplicateMessage, requestID, t.MessageID, msgID)
			}
			if head, ok := findQueued(q, t.Batch); t.joined() && ok {
				t = head // the batch's turn answers it
			}
			return Turn{RequestID: t.RequestID, StreamID: t.StreamID, MessageID: t.AssistantMessageID}, true, nil
		}
	}
	return Turn{}, false, nil
}

// waitingCount is the number of messages in the agent's queue.
func (c *commands) waitingCount() (int, error) {
	a := c.a
	q, err := a.store.Queue(a.agent)
	return len(q), err
}
