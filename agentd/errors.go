package agentd

import (
	"errors"
	"fmt"
	"strings"
)

var (
	// ErrConfig marks a bad setting: returned by Config.Validate, ParseFlags
	// and New. The message names the flag and environment variable to change.
	ErrConfig = errors.New("agentd: invalid config")
	// ErrAddrInUse is returned by Run when the HTTP address or the embedded
	// server's NATS listen address is taken. It is checked before anything
	// starts.
	ErrAddrInUse = errors.New("agentd: address in use")
	// ErrDataDir is returned by Run when the data dir cannot be created, is
	// not a directory, or is not writable.
	ErrDataDir = errors.New("agentd: data dir unusable")
	// ErrNATS is returned by Run when the embedded server does not start or
	// the connection to NATS cannot be made.
	ErrNATS = errors.New("agentd: nats unavailable")
	// ErrStarted is returned by Run when called twice, and by Add and
	// AddProjector when called after the daemon finished starting.
	ErrStarted = errors.New("agentd: daemon already started")
)

// flagError is an error meant for an operator: its message is one line that
// names the flag and environment variable to change. It wraps a sentinel and
// the cause.
type flagError struct {
	msg   string
	kind  error
	cause error
}

func (e *flagError) Error() string { return e.msg }
func (e *flagError) Unwrap() []error {
	if e.cause == nil {
		return []error{e.kind}
	}
	return []error{e.kind, e.cause}
}

// envName returns the environment variable that sets flag.
func envName(flag string) string {
	return "FOREVER_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// newFlagError returns "agentd: <msg> (set --<flag> or FOREVER_<FLAG>)".
func newFlagError(kind error, cause error, flag, msg string) error {
	return &flagError{
		msg:   fmt.Sprintf("agentd: %s (set --%s or %s)", msg, flag, envName(flag)),
		kind:  kind,
		cause: cause,
	}
}

// ConfigErrorf returns an error wrapping ErrConfig whose message names the
// flag to change and its environment variable: "agentd: <msg> (set
// --<flag> or FOREVER_<FLAG>)".
func ConfigErrorf(flag, format string, args ...any) error {
	return configErrorf(flag, format, args...)
}

func configErrorf(flag, format string, args ...any) error {
	return newFlagError(ErrConfig, nil, flag, fmt.Sprintf(format, args...))
}

// FlagError words an error of the standard flag package as agentd words
// its own: the flag with the two dashes its help shows ("unknown flag
// --bogus", "flag --wait needs a value"), never Go's "flag provided but
// not defined: -bogus". Other errors are returned as they are.
func FlagError(err error) error {
	msg := err.Error()
	name := func(s string) string { return "--" + strings.TrimLeft(s, "-") }
	switch {
	case strings.HasPrefix(msg, "flag provided but not defined: "):
		return fmt.Errorf("unknown flag %s", name(strings.TrimPrefix(msg, "flag provided but not defined: ")))
	case strings.HasPrefix(msg, "flag needs an argument: "):
		return fmt.Errorf("flag %s needs a value", name(strings.TrimPrefix(msg, "flag needs an argument: ")))
	case strings.HasPrefix(msg, "invalid value ") || strings.HasPrefix(msg, "invalid boolean value "):
		// invalid value "x" for flag -name: why
		if i := strings.Index(msg, " for flag "); i >= 0 {
			flag, why, _ := strings.Cut(msg[i+len(" for flag "):], ": ")
			return fmt.Errorf("%s for %s: %s", msg[:i], name(flag), why)
		}
	}
	return err
}
