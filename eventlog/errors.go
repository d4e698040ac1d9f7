package eventlog

import (
	"context"
	"errors"
	"fmt"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"strings"

	"github.com/forever-agents/forever/internal/apierror"
)

var (
	// ErrConflict is returned by Append and AppendBatch when the expected
	// last subject sequence given with ExpectSeq does not match the log: another
	// writer appended first. It wraps the server's error.
	ErrConflict = errors.New("eventlog: expected sequence mismatch")

	// ErrDuplicate is returned by Append when JetStream recognised the
	// message id as one it already stored within the duplicate window. The
	// sequence returned with it is the one of the original event; no new event
	// was stored.
	ErrDuplicate = errors.New("eventlog: duplicate event")

	// ErrInvalid is returned by Append, AppendBatch, Read and Follow for input
	// that can never be stored: an agent id or stream id that is not a valid
	// subject token, an empty or malformed event type, bad options.
	ErrInvalid = errors.New("eventlog: invalid input")

	// ErrTooLarge is returned by Append and AppendBatch when an encoded event is
	// larger than the server's max payload. Nothing is stored.
	ErrTooLarge = errors.New("eventlog: event exceeds max payload")

	// ErrCorrupt marks every error about stored data that cannot be decoded:
	// an event envelope, a projection row or a projection cursor.
	// Test with errors.Is(err, ErrCorrupt); the concrete type is *CorruptError.
	ErrCorrupt = errors.New("eventlog: corrupt data")

	// ErrClosed is returned by calls on a Log after Close, including reads
	// of its Views (Get, and Scan as its last item) and Projector.Run.
	ErrClosed = errors.New("eventlog: log closed")

	// ErrNotOwner is returned by appends to an agent's subjects when the
	// Log's Owner grants no token for the agent: this process does not own
	// it now. Nothing was sent.
	ErrNotOwner = errors.New("eventlog: not the agent's owner")

	// ErrFenced is returned by appends to an agent's subjects after one of
	// them conflicted under the current token: another writer appended to
	// the agent, so this process must stop writing it. It wraps the
	// ErrConflict that revealed it.
	ErrFenced = errors.New("eventlog: fenced out: another writer took the agent over")

	// ErrRemoved is returned by appends to an agent's subjects when the
	// log lost what this process wrote there: the subject's last sequence
	// is below the one its last append left, so its events (or a chat
	// stream's chunks) were removed under it, by a purge or a deletion of
	// the stream, not written over by another writer. Nothing was written;
	// the next append reads the subject again and goes on from what the
	// log holds. It wraps the ErrConflict that revealed it.
	ErrRemoved = errors.New("eventlog: events removed from under this writer (the stream was purged or deleted)")

	// ErrNotFound is returned by View.Get when a key is absent.
	ErrNotFound = errors.New("eventlog: not found")

	// ErrUnavailable is wrapped by append errors that only say JetStream
	// could not answer now (no stream responded, or the stream is electing
	// a leader): nothing was written, and a retry may succeed. Use
	// Unavailable to classify errors from anywhere, including the client
	// library's own.
	ErrUnavailable = errors.New("eventlog: JetStream unavailable, retry")
)

// OwnerLost reports whether err says this process may not write the
// agent now: it does not own it (ErrNotOwner) or another writer took it
// over (ErrFenced). Nothing was written. A writer that gets it stops the
// agent's work and writes nothing more for it, neither an error nor an
// outcome: the agent's new owner recovers the work and decides those.
func OwnerLost(err error) bool {
	return errors.Is(err, ErrNotOwner) || errors.Is(err, ErrFenced)
}

// ErrStorageFull is wrapped by append errors when JetStream has no room
// left: the server's storage limit (insufficient resources), or a stream's
// byte or message limit. Nothing was written; reads and replay go on, and
// appends succeed again once space returns (no restart needed). It is also
// wrapped, beside ErrViewsStalled, when Pebble's disk is full. It carries
// its answer to clients (503, "storage full"), as ErrViewsStalled does.
var ErrStorageFull error = apierror.Declare("eventlog", apierror.Unavailable, "storage full")

// ErrViewsStalled is returned by Log.Stalled while the projections cannot
// write to Pebble (a full or failing disk): the events are in the log, but
// the views do not show them yet, and WaitFor waits until they do. Reads
// of the views go on, and following resumes by itself once Pebble writes
// again. Callers refuse new work with it meanwhile.
var ErrViewsStalled error = apierror.Declare("eventlog", apierror.Unavailable, "projections stalled: Pebble cannot write")

// JetStream error codes of a full store.
const (
	codeInsufficientResources = 10023 // the server's storage limit
	codeStoreFailed           = 10077 // "{err}": a stream's limit, among others
)

// storageFull reports whether api says the store has no room left.
func storageFull(api *jetstream.APIError) bool {
	switch api.ErrorCode {
	case codeInsufficientResources:
		return true
	case codeStoreFailed:
		d := strings.ToLower(api.Description)
		return strings.Contains(d, "maximum bytes") || strings.Contains(d, "maximum messages") || strings.Contains(d, "resource")
	}
	return false
}

// errRefused marks a conflict that was not another writer: the append
// was refused and stored nothing, and the subject is where this writer
// left it (a stream leader that had not caught up with its log refused it,
// during a leader change) or ends with this writer's own earlier write.
// Sending it again is safe (Unwritten).
var errRefused = fmt.Errorf("%w: the append was refused, not by another writer; nothing of it was stored", ErrUnavailable)

// errUnfenced marks a chunk whose stream's fence was reset between its
// Add and its send (forgetChunks after a send of unknown fate, a new
// token): it is not sent, since the expected sequence is not known; the
// stream's next chunk reads the stream again (prepareChunks), so its writer
// goes on from what the stream holds. Nothing was written (Unwritten).
var errUnfenced = fmt.Errorf("%w: chunk not sent", ErrUnavailable)

// errNotSent marks an append that ended before its event was sent: the
// caller's context was done first (while it waited for the agent's fence).
// Nothing was written (Unwritten).
var errNotSent = errors.New("eventlog: not sent")

// notSent is the error of an append that did not send its event because
// ctx ended with cause.
func notSent(cause error) error {
	return fmt.Errorf("%w: %w", errNotSent, cause)
}

// unanswered reports whether err says a request was sent and no answer
// came in time: the caller's deadline passed, or the client library's own
// timeout did. What was sent may be stored. (A cancelled context is left
// as it is: a fiber cancelled on purpose is not a log failure.)
func unanswered(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout)
}

// Unknown reports whether err says an append's fate is unknown: it was
// sent and no answer came (ErrUnconfirmed), so it may be stored now or
// later, as JetStream answers a stream's writes late while it elects a
// leader. Whoever claimed something with the append (a turn's slot, a
// fiber's name) holds it until Settle says where, or whether, the event
// was stored.
func Unknown(err error) bool { return errors.Is(err, ErrUnconfirmed) }

// Refused reports whether err says the append was answered, and refused:
// JetStream sent an error back (an API error: over the account's storage,
// a stream's limit, a wrong expected sequence, a leader electing), or the
// log refused it before sending (invalid, too large, not the owner,
// fenced, closed). Nothing of it was stored, unlike an append that got no
// answer (Unknown), which may be stored now or later: a refusal claims
// nothing, so whoever started something with the append lets it go at
// once. A batch refused as a duplicate is stored, and not a refusal.
func Refused(err error) bool {
	switch {
	case err == nil, errors.Is(err, ErrUnconfirmed), errors.Is(err, ErrDuplicate):
		return false
	case Unwritten(err), errors.Is(err, ErrStorageFull), errors.Is(err, ErrInvalid), errors.Is(err, ErrTooLarge),
		OwnerLost(err), errors.Is(err, ErrConflict), errors.Is(err, ErrClosed), errors.Is(err, ErrRemoved):
		return true
	}
	var api *jetstream.APIError
	return errors.As(err, &api)
}

// codeClusterUnavailable is JetStream's "system temporarily unavailable",
// answered while a stream or the cluster elects a leader.
const codeClusterUnavailable = 10008

// Unwritten reports whether err says for certain that nothing was
// written: JetStream refused the request while electing a leader (10008),
// a leader behind its log refused it (errRefused), or no server took it
// (no responders). Unlike Unavailable it excludes a
// request whose answer was lost, which may have been stored; an append that
// failed Unwritten may be sent again as it was.
func Unwritten(err error) bool {
	if errors.Is(err, errRefused) || errors.Is(err, errNotSent) || errors.Is(err, errUnfenced) {
		return true
	}
	var api *jetstream.APIError
	if errors.As(err, &api) && api.ErrorCode == codeClusterUnavailable {
		return true
	}
	return errors.Is(err, nats.ErrNoResponders)
}

// Unavailable reports whether err only says JetStream could not answer now
// (ErrUnavailable, a 10008 API error, no stream response, no responders):
// nothing was written, and the caller may retry.
func Unavailable(err error) bool {
	var api *jetstream.APIError
	switch {
	case err == nil:
		return false
	case errors.Is(err, ErrUnavailable):
		return true
	case errors.As(err, &api) && api.ErrorCode == codeClusterUnavailable:
		return true
	}
	return errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders)
}

// readFailed describes a failed read of what. A read writes nothing, so
// JetStream slow or electing (Transient) makes it ErrUnavailable: the
// caller may retry at once, and agentd answers 503, not 500. An append
// keeps its own rule, since an append whose answer was lost may be stored.
func readFailed(what string, err error) error {
	if Transient(err) && !errors.Is(err, ErrUnavailable) {
		return fmt.Errorf("%w: %s: %w", ErrUnavailable, what, err)
	}
	return fmt.Errorf("eventlog: %s: %w", what, err)
}

// CorruptError describes stored data that cannot be decoded. It matches
// ErrCorrupt with errors.Is.
type CorruptError struct {
	What    string // "event", "cursor", "schema version", ...
	Seq     Seq    // stream sequence, when the data is an event
	Subject string // subject, when the data is an event
	Err     error  // the decoding error
}

func (e *CorruptError) Error() string {
	if e.Seq != 0 {
		return fmt.Sprintf("eventlog: corrupt %s at seq %d on %q: %v", e.What, e.Seq, e.Subject, e.Err)
	}
	return fmt.Sprintf("eventlog: corrupt %s: %v", e.What, e.Err)
}

// Unwrap returns the decoding error.
func (e *CorruptError) Unwrap() error { return e.Err }

// Is reports whether target is ErrCorrupt.
func (e *CorruptError) Is(target error) bool { return target == ErrCorrupt }

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...)
}
