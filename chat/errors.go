package chat

import (
	"errors"

	"github.com/forever-agents/forever/internal/apierror"
)

// Errors of the chat agent. The ones marked "bad input" are the caller's
// fault and map to 400, the "conflict" ones to 409, ErrNotFound to 404:
// each is declared with its code and the sentence a client reads
// (apierror.Declare; its Go text starts "chat: "), so gateways (replay,
// agentd) answer them without importing chat (ErrTooLarge is not: it
// matches eventlog.ErrTooLarge, 413).
var (
	// ErrEmptyMessage (bad input) is returned by Send for a request without
	// text: no Text, and no Message or a Message without any non-empty part.
	ErrEmptyMessage error = apierror.Declare("chat", apierror.BadRequest, "empty message")
	// ErrInvalidMessage (bad input) is returned by Send for a request that
	// cannot be sent: both Text and Message set, a Message role other than
	// user, a part of unknown type, a body that is not JSON.
	ErrInvalidMessage error = apierror.Declare("chat", apierror.BadRequest, "invalid message")
	// ErrDuplicateMessage (conflict) is returned by Send when the message id
	// is already in the conversation as another message than a user
	// message sent with its turn, or the request id is the turn of another
	// message. (A retried Send of a stored message gets its turn back.)
	ErrDuplicateMessage error = apierror.Declare("chat", apierror.Conflict, "message id already in the conversation")
	// ErrTurnActive (conflict) is returned by Send and ContinueLastTurn while
	// a turn of the agent is streaming or waits for recovery (Send: with
	// the MultitaskReject policy, the default). One turn runs at a time per
	// agent.
	ErrTurnActive error = apierror.Declare("chat", apierror.Conflict, "a turn is already active")
	// ErrVersionConflict (conflict) is returned by SetState when the state's
	// version is not the expected one: another writer set it first.
	ErrVersionConflict error = apierror.Declare("chat", apierror.Conflict, "state version conflict")
	// ErrNoAssistantMessage (conflict) is returned by ContinueLastTurn when
	// the conversation has no assistant message to continue.
	ErrNoAssistantMessage error = apierror.Declare("chat", apierror.Conflict, "no assistant message to continue")
	// ErrInvalidConfig is returned by New and Config.Validate.
	ErrInvalidConfig = errors.New("chat: invalid config")
	// ErrNotFound is returned by Store reads of a message or turn that does
	// not exist.
	ErrNotFound error = apierror.Declare("chat", apierror.NotFound, "not found")
	// ErrRecoveryExhausted is the cause recorded (error chunk, turn.failed)
	// when a turn was recovered more than MaxRecoveryAttempts times without
	// progress, or failed with retryable provider errors that often.
	ErrRecoveryExhausted = errors.New("chat: recovery attempts exhausted")
	// ErrTooLarge (bad input) is returned by Send and ContinueLastTurn for a
	// message or request body too large for one event, before anything is
	// appended; and it is the cause recorded (error chunk, turn.failed) when
	// a turn's answer is too large to store as its assistant message. Errors
	// wrapping it also match eventlog.ErrTooLarge.
	ErrTooLarge = errors.New("chat: message too large")
	// ErrChunksExpired is the cause recorded (error chunk, turn.failed) when
	// a turn is recovered or ended after the chunks stream's safety cap
	// (eventlog.Config.ChunkSafetyAge) removed the start of its stream: what
	// clients saw is gone, so the turn is neither continued nor its partial
	// answer stored.
	ErrChunksExpired = errors.New("chat: the stream's chunks expired")
	// ErrCancelled is the context cause of a turn stopped by Cancel or the
	// "turn" interrupt.
	ErrCancelled = errors.New("chat: turn cancelled")
)
