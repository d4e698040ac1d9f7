package apierror_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/forever-agents/forever/internal/apierror"
)

// errTurn is a sentinel as a package declares it.
var errTurn = apierror.Declare("newpkg", apierror.Conflict, "a turn is already active")

// coded is an error of a package that declares no answer: it has a code
// and a Go text that must not reach a client.
type coded struct{ code int }

func (c coded) Error() string   { return "newpkg: the secret words of the process" }
func (c coded) StatusCode() int { return c.code }

// TestDeclaredAnswers: a declared sentinel answers its code and sentence,
// with the detail its site wrote, however it is wrapped, and its Go text
// keeps its package.
func TestDeclaredAnswers(t *testing.T) {
	if got, want := errTurn.Error(), "newpkg: a turn is already active"; got != want {
		t.Fatalf("Error() = %q, want %q", got, want)
	}
	for _, tc := range []struct {
		name string
		err  error
		code int
		want string
	}{
		{"alone", errTurn, 409, "a turn is already active"},
		{"detail", fmt.Errorf("%w: turn r1 runs", errTurn), 409, "a turn is already active: turn r1 runs"},
		{"detail in parentheses", fmt.Errorf("%w (2 running)", errTurn), 409, "a turn is already active (2 running)"},
		{"context outside", fmt.Errorf("agentd: send: %w", fmt.Errorf("%w: turn r1 runs", errTurn)), 409, "a turn is already active: turn r1 runs"},
		{"suffix outside", fmt.Errorf("%w (--role)", fmt.Errorf("%w: turn r1 runs", errTurn)), 409, "a turn is already active: turn r1 runs (--role)"},
		{"Wrapf", errTurn.Wrapf("turn %s runs", "r1"), 409, "a turn is already active: turn r1 runs"},
		{"in a class", fmt.Errorf("%w: %w", apierror.ErrConflict, fmt.Errorf("%w: turn r1 runs", errTurn)), 409, "a turn is already active: turn r1 runs"},
		{"class detail", fmt.Errorf("%w: limit must be from 1 to 10", apierror.ErrBadRequest), 400, "limit must be from 1 to 10"},
		{"class Wrapf", apierror.ErrBadRequest.Wrapf("limit must be from 1 to %d", 10), 400, "limit must be from 1 to 10"},
		{"class Wrapf with a cause", apierror.ErrUnavailable.Wrapf("publish: %w", errors.New("no responders")), 503, "publish: no responders"},
		{"class alone", apierror.ErrNotFound, 404, apierror.Text(404)},
		{"joined", errors.Join(errors.New("newpkg: other"), errTurn), 409, "a turn is already active"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := apierror.From(tc.err)
			if e.Code != tc.code || e.Message != tc.want {
				t.Fatalf("From = %d %q, want %d %q", e.Code, e.Message, tc.code, tc.want)
			}
			if !errors.Is(e, tc.err) && !errors.Is(tc.err, e) && !errors.Is(e, errTurn) && !errors.Is(e, apierror.ErrBadRequest) &&
				!errors.Is(e, apierror.ErrUnavailable) && !errors.Is(e, apierror.ErrNotFound) {
				t.Fatalf("the answer lost its sentinel: %v", e)
			}
		})
	}
}

// TestUndeclaredSaysNothing: an error that declares no answer, alone,
// wrapped with context or beside a class, answers its code's fixed
// sentence and never a word of its own text, so a new package's errors
// cannot leak their Go prefix to clients.
func TestUndeclaredSaysNothing(t *testing.T) {
	secret := coded{apierror.Conflict}
	for _, tc := range []struct {
		name string
		err  error
		code int
	}{
		{"plain", errors.New("newpkg: the secret words of the process"), 500},
		{"coded", secret, 409},
		{"coded in context", fmt.Errorf("agentd: op: %w", secret), 409},
		{"beside a class", fmt.Errorf("%w: %w", apierror.ErrConflict, secret), 409},
		{"beside a class, joined", errors.Join(apierror.ErrConflict, secret), 409},
		{"in context beside a class", fmt.Errorf("host: op: %w", fmt.Errorf("%w: %w", apierror.ErrConflict, secret)), 409},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := apierror.From(tc.err)
			if e.Code != tc.code || e.Message != apierror.Text(tc.code) {
				t.Fatalf("From = %d %q, want %d %q", e.Code, e.Message, tc.code, apierror.Text(tc.code))
			}
			if !errors.Is(e, tc.err) {
				t.Fatalf("the answer does not wrap the error, for the log: %v", e.Err)
			}
		})
	}
}

// TestClassIs: a class matches the errors of its code no package
// declared, and a package's sentinel only where it is wrapped in one: a
// package's 503 is not a retry unless it says so.
func TestClassIs(t *testing.T) {
	overloaded := apierror.Declare("newpkg", apierror.Unavailable, "too many turns")
	for _, tc := range []struct {
		name  string
		err   error
		class *apierror.Error
		want  bool
	}{
		{"New", apierror.New(400, "x"), apierror.ErrBadRequest, true},
		{"Wrapf of the class", apierror.ErrBadRequest.Wrapf("x"), apierror.ErrBadRequest, true},
		{"BadAgentID", apierror.BadAgentID("agent id", "a.b"), apierror.ErrBadRequest, true},
		{"another code", apierror.New(404, "x"), apierror.ErrBadRequest, false},
		{"declared", overloaded, apierror.ErrUnavailable, false},
		{"declared with detail", fmt.Errorf("%w (2 running)", overloaded), apierror.ErrUnavailable, false},
		{"declared in the class", fmt.Errorf("%w: %w", apierror.ErrUnavailable, overloaded), apierror.ErrUnavailable, true},
		{"the sentinel's Wrapf", overloaded.Wrapf("2 running"), overloaded, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := errors.Is(tc.err, tc.class); got != tc.want {
				t.Fatalf("errors.Is(%v, %v) = %v, want %v", tc.err, tc.class, got, tc.want)
			}
		})
	}
}
