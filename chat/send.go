package chat

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/forever-agents/forever/chat/llm"
	"github.com/forever-agents/forever/eventlog"
	"github.com/nats-io/nuid"
)

// SendRequest is a user message and the request context of its turn.
type SendRequest struct {
	// Text is the message text; or set Message.
	Text string
	// Message is the user message (role user or empty, text parts). An
	// empty ID is RequestID, or a generated one without it.
	Message *Message
	// RequestID is the command's identity when the client's message has
	// no id: minted by the first node that received the command, and
	// passed along wherever the command goes (forwarded, retried,
	// re-routed across an ownership change). It becomes the turn's request
	// id, and the message's id when the message has none. At most 128
	// bytes of letters, digits and "-_.:"; empty: Send mints one (and the
	// command has no identity beyond this call).
	RequestID string
	// Body is the last request body (for example the AI SDK useChat body),
	// kept with the turn and handed to OnChatRecovery.
	Body json.RawMessage
	// Tools are client tool schemas offered to the model.
	Tools []llm.Tool
	// Multitask is what to do if a turn of the agent runs (or messages
	// wait in its queue): "" is Config.Multitask.
	Multitask Multitask
	// Debounce, when positive, is the quiet window of a MultitaskDebounce
	// message's batch, instead of Config.DebounceWindow (at most
	// MaxDebounceWindow).
	Debounce time.Duration
	// Parent is set when a sub-agent call of another agent's turn sends
	// the message: the turn records it, and tells the parent when it
	// ends. A parent whose chain of callers holds this agent is refused
	// (ErrInvalidMessage): a cycle.
	Parent *ParentRef
	// rewrite is set by Rewrite: the sequence of its truncation, which
	// makes the turn's event id differ from an earlier send of the same
	// message id.
	rewrite string
}

// Turn identifies a started turn.
type Turn struct {
	RequestID string `json:"requestId"`
	StreamID  string `json:"streamId"`
	// MessageID is the id of the assistant message the turn writes.
	MessageID string `json:"messageId"`
	// Cursor is a sequence of the chunks stream to follow the turn's
	// stream after: for a new turn, the agent's last chunk before the
	// turn's first (so following all of the agent's chunks from it, as
	// agentd tail --from does, starts at the turn), and 0 when that could
	// not be read or the Send answered a copy of a command; 0 follows the
	// stream's own subject from its first chunk.
	Cursor eventlog.Seq `json:"cursor"`
}

// Send stores the user message and starts a turn answering it, as a
// background fiber named TurnFiberPrefix+requestId. The message is stored
// in the turn's turn.started, so neither is ever stored without the other.
// It returns once the fiber and turn.started are durable: an acknowledged
// Send is never lost, and a crash from then on is recovered. A Send that
// fails may have stored its turn (the log did not confirm it); it then
// runs, or recovery runs it.
//
// A command runs once: its identity is the message's id, or RequestID
// (see SendRequest). A Send whose message id, or request id, is already
// stored with its turn starts nothing and returns that turn (the
// original's requestId, streamId and messageId, cursor 0), also while the
// turn runs. The store refuses a second copy: turn.started's event id is
// derived from the agent and the message id, so JetStream drops a copy
// appended within its duplicate window (2 minutes) whatever node sends it;
// after the window the conversation itself (checked after catching up with
// the log, under the agent's turn slot, by its one fenced owner) finds the
// original. A message removed by Truncate no longer counts, unless
// the command carries its RequestID, whose turn stays.
//
// One turn runs at a time per agent: Send while another turn streams (or
// waits for recovery) follows req.Multitask (multitask.go); by default it
// returns ErrTurnActive and does not queue. A stale "turn" interrupt flag
// is cleared first, so it cannot abort the new turn.
//
// Errors: ErrEmptyMessage, ErrInvalidMessage (bad input),
// ErrDuplicateMessage (the message id is another message's, or the request
// id another message's turn), ErrTurnActive, ErrTooLarge, ErrMultitask, or
// a log error.
func (c *commands) Send(ctx context.Context, req SendRequest) (Turn, error) {
	a := c.a
	if req.RequestID != "" && !validRequestID(req.RequestID) {
		return Turn{}, fmt.Errorf("%w: request id %q: want 1 to %d letters, digits or \"-_.:\"", ErrInvalidMessage, req.RequestID, maxRequestID)
	}
	if err := a.checkParent(req.Parent); err != nil {
		return Turn{}, err
	}
	msg, err := a.userMessage(req)
	if err != nil {
		return Turn{}, err
	}
	// A retried command whose turn the views already show. The views of
	// messages and of turns apply turn.started each at its own pace: one
	// that shows the message before the other shows its turn is asked
	// again once the views caught up with the log.
	orig, ok, err := a.sent(msg.ID, req.RequestID)
	if errors.Is(err, errTurnNotShown) {
		if cerr := a.catchUp(ctx); cerr != nil {
			return Turn{}, cerr
		}
		orig, ok, err = a.sent(msg.ID, req.RequestID)
	}
	if err != nil || ok {
		return orig, err
	}
	return a.admit(ctx, req, msg) // the multitask policy: multitask.go
}

// sendNow starts msg's turn, or returns ErrTurnActive.
func (c *commands) sendNow(ctx context.Context, req SendRequest, msg Message) (Turn, error) {
	a := c.a
	t := turnStarted{
		RequestID: cmp.Or(req.RequestID, nuid.Next()), StreamID: nuid.Next(), MessageID: msg.ID,
		AssistantMessageID: nuid.Next(), Body: req.Body, Tools: req.Tools, Parent: req.Parent,
		rewrite: req.rewrite,
	}
	msg.RequestID = t.RequestID
	t.Message = &msg
	turn, err := a.start(ctx, t, &msg, nil, "")
	if errors.Is(err, ErrTurnActive) || errors.Is(err, eventlog.ErrDuplicate) {
		// Refused while its original runs, or stored by another node
		// meanwhile: the original's reply, once the views show it.
		if cerr := a.catchUp(ctx); cerr == nil {
			if orig, ok, serr := a.sent(msg.ID, req.RequestID); serr == nil && ok {
				return orig, nil
			}
		}
	}
	return turn, err
}

// maxRequestID bounds a caller's request id.
const maxRequestID = 128

// validRequestID reports whether id can be a request id: it names a fiber
// and keys the views.
func validRequestID(id string) bool {
	if len(id) == 0 || len(id) > maxRequestID {
		return false
	}
	for _, c := range []byte(id) {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '_', c == '.', c == ':':
		default:
			return false
		}
	}
	return true
}

// sent returns the turn a Send of message msgID (or with request id
// requestID, when set) started before, if the views show one.
// ErrDuplicateMessage: the id is taken by another message, or the request
// id by another message's turn.
func (c *commands) sent(msgID, requestID string) (Turn, bool, error) {
	a := c.a
	if requestID != "" {
		info, err := a.store.Turn(a.agent, requestID)
		switch {
		case err == nil && info.MessageID == msgID:
			return turnOf(info), true, nil
		case err == nil:
			return Turn{}, false, fmt.Errorf("%w: request id %q is the turn of message %q, not %q", ErrDuplicateMessage, requestID, info.MessageID, msgID)
		case !errors.Is(err, ErrNotFound):
			return Turn{}, false, err
		}
	}
	m, err := a.store.Message(a.agent, msgID)
	if errors.Is(err, ErrNotFound) {
		return Turn{}, false, nil
	}
	if err != nil {
		return Turn{}, false, err
	}
	if m.Role != RoleUser || m.RequestID == "" {
		return Turn{}, false, fmt.Errorf("%w: %q is the id of another message", ErrDuplicateMessage, msgID)
	}
	info, err := a.store.Turn(a.agent, m.RequestID)
	if errors.Is(err, ErrNotFound) {
		return Turn{}, false, fmt.Errorf("%w: message %q is stored without its turn", errTurnNotShown, msgID)
	}
	if err != nil {
		return Turn{}, false, err
	}
	return turnOf(info), true, nil
}

// errTurnNotShown is sent's ErrDuplicateMessage for a user message the
// views show without its turn: before they caught up with the log, the
// turns view may not have applied the turn.started the messages view did.
var errTurnNotShown = fmt.Errorf("%w", ErrDuplicateMessage)

// turnOf is the reply to the command that started the turn info.
func turnOf(info TurnInfo) Turn {
	return Turn{RequestID: info.RequestID, StreamID: info.StreamID, MessageID: info.AssistantMessageID}
}

// sendEventID is the event id (JetStream's Nats-Msg-Id) of the
// turn.started of the Send of message msgID: the same for every copy of
// the command, so the stream stores one within its duplicate window.
func sendEventID(agent, msgID string) string {
	h := sha256.Sum256([]byte(agent + "\x00send\x00" + msgID))
	return "send-" + hex.EncodeToString(h[:16])
}

func (c *commands) userMessage(req SendRequest) (Message, error) {
	a := c.a
	if req.Body != nil && !json.Valid(req.Body) {
		return Message{}, fmt.Errorf("%w: body is not JSON", ErrInvalidMessage)
	}
	var m Message
	switch {
	case req.Message != nil && req.Text != "":
		return Message{}, fmt.Errorf("%w: set Text or Message, not both", ErrInvalidMessage)
	case req.Message != nil:
		m = *req.Message
		m.Parts = append([]Part(nil), m.Parts...)
	default:
		m = Message{Parts: []Part{{Type: PartText, Text: req.Text}}}
	}
	if m.Role == "" {
		m.Role = RoleUser
	}
	if m.Role != RoleUser {
		return Message{}, fmt.Errorf("%w: role %q, want %q", ErrInvalidMessage, m.Role, RoleUser)
	}
	for _, p := range m.Parts {
		if p.Type != PartText {
			return Message{}, fmt.Errorf("%w: part type %q in a user message", ErrInvalidMessage, p.Type)
		}
	}
	if strings.TrimSpace(partsText(m.Parts)) == "" {
		return Message{}, ErrEmptyMessage
	}
	if m.ID == "" {
		m.ID = cmp.Or(req.RequestID, nuid.Next())
	}
	if m.CreatedAt.IsZero() {
		m.CreatedAt = a.cfg.Clock.Now().UTC()
	}
	return m, nil
}
