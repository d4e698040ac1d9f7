package apierror

import (
	"fmt"
	"strings"
)

// The classes of client-visible errors, one per code a package answers
// without a sentinel of its own. Each is an *Error whose sentence is its
// code's (Text), and errors.Is matches it against every *Error of its
// code that no package declared (New, BadAgentID, Decode's, a class's
// Wrapf), as jetstream's APIError.Is compares codes; a package's declared
// sentinel matches it only when wrapped in it, fmt.Errorf("%w: %w",
// ErrBadRequest, err). A site says what is wrong with Wrapf, which gives
// the client its sentence:
//
//	return apierror.ErrBadRequest.Wrapf("limit must be from 1 to %d, got %d", max, n)
//
// ErrBadRequest is the one bad-request sentinel: host.ErrBadRequest and
// replay.ErrBadRequest are this value.
var (
	ErrBadRequest  = class(BadRequest)
	ErrForbidden   = class(Forbidden)
	ErrNotFound    = class(NotFound)
	ErrConflict    = class(Conflict)
	ErrTooLarge    = class(TooLarge)
	ErrUnavailable = class(Unavailable)
	ErrTimeout     = class(Timeout)
)

func class(code int) *Error { return &Error{Code: code, Message: Text(code), class: true} }

// Declare returns the sentinel of an error a package returns to clients,
// carrying its answer where it is born: code and sentence are what a
// client reads, and Error() reads "pkg: sentence" inside the process (in
// logs and Go errors). The sentence names no Go package or type; pkg is
// never sent (TestDeclaredSentences checks the package's own).
//
//	var ErrTurnActive = apierror.Declare("chat", apierror.Conflict, "a turn is already active")
func Declare(pkg string, code int, sentence string) *Error {
	return &Error{Code: code, Message: sentence, pkg: pkg}
}

// Wrapf returns an error of e's code that says more: its sentence is e's,
// ": " and the detail fmt.Errorf(format, args...) reads; a class
// (ErrBadRequest, ...) has no sentence of its own, so it says the detail
// alone. The result matches e (errors.Is) and every error the detail
// wraps with %w. The detail is sent to clients: write it for them.
func (e *Error) Wrapf(format string, args ...any) *Error {
	d := fmt.Errorf(format, args...)
	msg := d.Error()
	if !e.class {
		msg = e.Message + ": " + msg
	}
	var cause error = e
	if hasCause(d) {
		cause = &detail{e, d}
	}
	return &Error{Code: e.Code, Message: msg, RetryAfter: e.RetryAfter, Err: cause, pkg: e.pkg}
}

func hasCause(err error) bool {
	switch u := err.(type) {
	case interface{ Unwrap() error }:
		return u.Unwrap() != nil
	case interface{ Unwrap() []error }:
		return len(u.Unwrap()) > 0
	}
	return false
}

// detail is the cause of a Wrapf with %w: the sentinel and the detail.
type detail struct{ sentinel, detail error }

func (d *detail) Error() string   { return d.detail.Error() }
func (d *detail) Unwrap() []error { return []error{d.sentinel, d.detail} }

// Answerer is an error that carries its answer to clients: the code and
// sentence to send. *Error is one; a struct error with fields of its own
// (a quota's limit, a budget's reset) implements it, as jetstream's
// JetStreamError has APIError.
type Answerer interface {
	error
	APIError() *Error
}

// APIError returns e: an *Error is its own answer.
func (e *Error) APIError() *Error { return e }

// Declared returns the answer of the first error in err's chain that
// carries one (an Answerer), or nil when none does: such an error was not
// written for clients, and the edge answers it with its code's fixed
// sentence (Text).
//
// A sentinel wrapped by fmt.Errorf("%w: detail", ErrX), the way Go code
// adds detail to a sentinel, answers with its sentence and that detail:
// the text the outermost such wrapper writes after the sentinel's own
// Error(), which replaces the sentinel's Go text (its package name) by its
// declared sentence. A class (ErrBadRequest, ...) says the detail alone.
// Of several wrapped errors (errors.Join, two %w), the first answer that
// is not a class is taken, with the detail its wrappers write, else the
// first class, with none from the wrapper of several: so
// fmt.Errorf("%w: %w", ErrBadRequest, err) answers err's declared
// sentence, or the class's fixed one. Nothing else is ever read out of an
// error's text: an error that declares no answer, alone, wrapped with
// context (fmt.Errorf("op: %w")) or beside a class, answers no word of
// its own (TestUndeclaredSaysNothing); only a site that writes it into
// the detail of a sentinel (%v, or a %w after a declared one) sends it.
// Wrapf, at the site, is the explicit form of the detail.
func Declared(err error) *Error {
	ans, _ := declared(err, nil)
	if ans != nil && ans.Err == nil && error(ans) != err {
		// A sentinel found inside err: keep err as the cause, for the log.
		c := *ans
		c.Err, c.class = err, false
		ans = &c
	}
	return ans
}

// declared is Declared of err wrapped by outer (outermost first), and
// whether the answer is a class's.
func declared(err error, outer []error) (*Error, bool) {
	for err != nil {
		if a, ok := err.(Answerer); ok {
			ans := a.APIError()
			return withDetail(a, ans, outer), ans.class
		}
		switch u := err.(type) {
		case interface{ Unwrap() error }:
			outer = append(outer, err)
			err = u.Unwrap()
		case interface{ Unwrap() []error }:
			outer = append(outer, err)
			var first *Error
			for _, e := range u.Unwrap() {
				ans, class := declared(e, outer[:len(outer):len(outer)])
				switch {
				case ans == nil:
				case !class:
					return ans, false
				case first == nil:
					first, _ = declared(e, nil)
				}
			}
			return first, first != nil
		default:
			return nil, false
		}
	}
	return nil, false
}

// withDetail is ans, a's answer, with the detail the outermost of outer
// writes after a's text.
func withDetail(a Answerer, ans *Error, outer []error) *Error {
	own := a.Error()
	for _, o := range outer {
		rest, ok := strings.CutPrefix(o.Error(), own)
		if !ok || rest == "" {
			continue
		}
		msg := ans.Message + rest
		if ans.class {
			if d, ok := strings.CutPrefix(rest, ": "); ok {
				msg = d
			}
		}
		c := *ans
		c.Message, c.class, c.Err = msg, false, o
		return &c
	}
	return ans
}
