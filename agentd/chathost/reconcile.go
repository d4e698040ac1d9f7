package chathost

import (
	"context"
	"errors"

	"github.com/forever-agents/forever/agentd/host"
	"github.com/forever-agents/forever/chat"
	"github.com/forever-agents/forever/replay"
)

// An AI SDK request carries the client's conversation (whole, or only its
// last message with prepareSendMessagesRequest), its trigger
// ("submit-message" or "regenerate-message") and, for an edit, the
// messageId edited. The stored conversation is the reference; the request
// is compared with it by message id, and follows the AI SDK's own
// semantics (what useChat shows after the call):
//
//   - a new user message continues the conversation;
//   - the same message again (same id, same text, no messageId) is a
//     retry: the first one's turn is answered;
//   - a regenerate (trigger "regenerate-message") of the user message the
//     client ends on drops every message after it and answers it again;
//   - an edit (a stored user message sent again with other text, or with
//     messageId set to its id) drops the message and everything after it,
//     stores the new text under the same id and answers it;
//   - a new message after a history that ends at an earlier stored message
//     (the client dropped the messages after it) drops those messages and
//     continues from there.
//
// Dropping is one messages.truncated event: the messages stay in the log.
// A history whose earlier messages do not match the stored ones (other
// ids, or other user texts, before the point the client continues from)
// cannot be reconciled: 409, and nothing is stored. A history the server
// has never seen the end of (a message it never stored, such as the empty
// assistant message of a turn that failed before it started) is not an
// error: the stored conversation is the reference.

// Triggers of an AI SDK request.
const (
	triggerSubmit     = "submit-message"
	triggerRegenerate = "regenerate-message"
)

// storedConversation is what reconcile reads of the stored conversation.
type storedConversation interface {
	// LastID is the id of the last visible message, "" for none.
	LastID() string
	// Message is a visible message by id, chat.ErrNotFound if none.
	Message(id string) (chat.Message, error)
	// All is the whole visible conversation, oldest first.
	All() ([]chat.Message, error)
}

// plan is what a chat request does: send the message (a new turn, or a
// retry's original), or rewrite the conversation after AfterID ("" = from
// the start) with it.
type plan struct {
	Rewrite bool
	AfterID string
}

// reconcile decides how the AI SDK request req (a user message to send)
// applies to the stored conversation conv. Errors are 409
// (host.ErrConflict) and 400, with the sentence a client reads.
func reconcile(req Request, conv storedConversation) (plan, error) {
	msg := req.Message
	switch req.Trigger {
	case "", triggerSubmit, triggerRegenerate:
	default:
		return plan{}, host.ErrBadRequest.Wrapf("\"trigger\" is %q: want %q or %q", req.Trigger, triggerSubmit, triggerRegenerate)
	}
	if msg.ID == "" {
		return plan{}, nil
	}
	stored, err := conv.Message(msg.ID)
	switch {
	case err == nil && stored.Role == chat.RoleUser:
		return reconcileStored(req, stored, conv)
	case err == nil:
		return plan{}, nil // another message's id: Send refuses it
	case !errors.Is(err, chat.ErrNotFound):
		return plan{}, err
	}
	// A new message (a regenerate of a message the server does not have,
	// such as the resend of a rewrite a crash cut short, is one too).
	h := req.History
	if h == nil || h.Count == 0 || h.LastID == "" || h.LastID == conv.LastID() {
		return plan{}, nil
	}
	all, err := conv.All()
	if err != nil {
		return plan{}, err
	}
	at := indexOf(all, h.LastID)
	switch {
	case at < 0:
		return plan{}, nil // the client's history ends with a message never stored
	case at == len(all)-1:
		return plan{}, nil
	case !sameHistory(all[:at+1], *h):
		return plan{}, historyConflict(all[:at+1], *h)
	}
	return plan{Rewrite: true, AfterID: h.LastID}, nil
}

// reconcileStored decides for a message whose id is a stored user
// message's: a retry, a regenerate or an edit.
func reconcileStored(req Request, stored chat.Message, conv storedConversation) (plan, error) {
	edited := textOf(req.Message.Parts) != textOf(stored.Parts)
	if req.Trigger != triggerRegenerate && req.MessageID != req.Message.ID && !edited {
		return plan{}, nil // a retry: Send answers the original turn
	}
	all, err := conv.All()
	if err != nil {
		return plan{}, err
	}
	at := indexOf(all, stored.ID)
	if at < 0 {
		return plan{}, nil
	}
	if h := req.History; h != nil && h.Count > 0 && !sameHistory(all[:at], *h) {
		return plan{}, historyConflict(all[:at], *h)
	}
	p := plan{Rewrite: true}
	if at > 0 {
		p.AfterID = all[at-1].ID
	}
	return p, nil
}

// sameHistory reports whether msgs are the messages h sums up.
func sameHistory(msgs []chat.Message, h replay.History) bool {
	got := digestOf(msgs)
	return got.Count == h.Count && got.Digest == h.Digest
}

// digestOf sums msgs up as the gateway sums up a request's earlier
// messages.
func digestOf(msgs []chat.Message) replay.History {
	var d replay.HistoryDigest
	for _, m := range msgs {
		d.Add(m.ID, m.Role, textsOf(m.Parts))
	}
	return d.History()
}

func historyConflict(stored []chat.Message, h replay.History) error {
	return host.ErrConflict.Wrapf("the request's %d earlier messages do not match the %d stored before the point it continues from (compared by id, role and user text): read the conversation (GET /v1/chat/{id}/messages) and send the request again from it", h.Count, len(stored))
}

func indexOf(msgs []chat.Message, id string) int {
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].ID == id {
			return i
		}
	}
	return -1
}

func textsOf(ps []chat.Part) []string {
	var out []string
	for _, p := range ps {
		if p.Type == chat.PartText {
			out = append(out, p.Text)
		}
	}
	return out
}

func textOf(ps []chat.Part) string {
	var n int
	for _, t := range textsOf(ps) {
		n += len(t) + 1
	}
	b := make([]byte, 0, n)
	for _, t := range textsOf(ps) {
		b = append(b, t...)
		b = append(b, 0)
	}
	return string(b)
}

// agentConversation reads the stored conversation of a chat agent.
type agentConversation struct {
	a    *chat.Agent
	last string
}

func (c agentConversation) LastID() string { return c.last }

func (c agentConversation) Message(id string) (chat.Message, error) { return c.a.Message(id) }

func (c agentConversation) All() ([]chat.Message, error) {
	var all []chat.Message
	p := chat.Page{Limit: 500}
	for {
		msgs, next, err := c.a.Messages(p)
		if err != nil {
			return nil, err
		}
		all = append(all, msgs...)
		if next == "" {
			return all, nil
		}
		p.After = next
	}
}

// send sends the user message of req, as reconcile decides: a new turn
// (or a retry's original) with Send, or a rewrite of the conversation.
func (c *Agent) send(ctx context.Context, req Request, sr chat.SendRequest) (chat.Turn, error) {
	if req.Message == nil || (req.History == nil && req.Trigger == "" && req.MessageID == "") {
		return c.Send(ctx, sr) // not an AI SDK request: as before
	}
	last, err := c.Conversation(ctx)
	if err != nil {
		return chat.Turn{}, err
	}
	p, err := reconcile(req, agentConversation{a: c.Agent, last: last})
	if err != nil {
		return chat.Turn{}, err
	}
	if !p.Rewrite {
		return c.Send(ctx, sr)
	}
	return c.Rewrite(ctx, p.AfterID, sr)
}
