package fiber

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/forever-agents/forever/eventlog"
)

// VersionPolicy says what Recover does with a fiber that last ran under
// another version of the code than the Runner's (Config.Version). It
// mirrors the choices of Temporal's worker versioning: an auto-upgraded
// workflow (continue), a reset to the start (restart), and a pinned
// workflow whose version is gone (fail).
type VersionPolicy string

// The version policies. The zero value is VersionContinue.
const (
	// VersionContinue resumes the fiber under the new version from its
	// snapshot, after Hooks.MigrateSnapshot (when set) converted it.
	VersionContinue VersionPolicy = "continue"
	// VersionRestart drops the fiber's snapshot: the recovery hook gets
	// Recovered.Restarted and no snapshot, and the function runs again
	// from its beginning under the fiber's ID. Steps it completed keep
	// their recorded results (a side effect never repeats silently); a
	// chat turn is run again from its last message (package chat).
	VersionRestart VersionPolicy = "restart"
	// VersionFail ends the fiber with fiber.failed and a *VersionError,
	// after Hooks.OnVersionFailed (a chat turn ends its stream with an
	// error chunk and records turn.failed).
	VersionFail VersionPolicy = "fail"
)

// ParseVersionPolicy returns the policy named s ("" is VersionContinue).
func ParseVersionPolicy(s string) (VersionPolicy, error) {
	switch p := VersionPolicy(s); p {
	case "":
		return VersionContinue, nil
	case VersionContinue, VersionRestart, VersionFail:
		return p, nil
	}
	return "", invalidf("version policy %q: want continue, restart or fail", s)
}

// ErrVersionChanged marks a *VersionError: a fiber recovered under another
// version than the one it last ran under, ended by its policy (VersionFail)
// or by a failed migration of its snapshot.
var ErrVersionChanged = errors.New("fiber: recovered by another version")

// VersionError is the error a fiber ends with when VersionFail, or a
// Hooks.MigrateSnapshot error, ends it on recovery: fiber.failed carries
// its text, Hooks.OnVersionFailed and Hooks.OnError receive it. It matches
// ErrVersionChanged with errors.Is and unwraps to the migration's error.
type VersionError struct {
	ID, Name string
	// From is the version the fiber last ran under, To the Runner's.
	From, To string
	Policy   VersionPolicy
	// Err is the migration's error, nil when the policy failed the fiber.
	Err error
}

func (e *VersionError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("fiber %s (%q) was started by version %q and cannot be continued by version %q: migrate its snapshot: %v", e.ID, e.Name, e.From, e.To, e.Err)
	}
	return fmt.Sprintf("fiber %s (%q) was started by version %q; version %q recovered it and its version policy is %s", e.ID, e.Name, e.From, e.To, e.Policy)
}

// Unwrap returns the migration's error.
func (e *VersionError) Unwrap() error { return e.Err }

// Is reports whether target is ErrVersionChanged.
func (e *VersionError) Is(target error) bool { return target == ErrVersionChanged }

// versionChange is what Recover does about row's version: nothing when
// the Runner or the fiber is unversioned or the versions match.
type versionChange struct {
	from, to string
	policy   VersionPolicy
}

func (r *Runner) versionChange(row Row) (versionChange, bool) {
	from, to := row.RanUnder(), r.cfg.Version
	if from == "" || to == "" || from == to {
		return versionChange{}, false
	}
	return versionChange{from: from, to: to, policy: r.policyOf(row.Name)}, true
}

// policyOf returns the version policy of the fibers named name.
func (r *Runner) policyOf(name string) VersionPolicy {
	if r.cfg.VersionPolicyOf != nil {
		if p := r.cfg.VersionPolicyOf(name); p != "" {
			if _, err := ParseVersionPolicy(string(p)); err == nil {
				return p
			}
		}
	}
	return r.cfg.VersionPolicy
}

// Version returns the version of the code the Runner runs
// (Config.Version), "" when unversioned.
func (r *Runner) Version() string { return r.cfg.Version }

// applyVersion prepares the recovery of row under another version: the
// payload of its fiber.recovered (the new version and, when the policy
// changes it, the snapshot) and rec as the hook sees it. A migration that
// fails, or VersionFail, returns a *VersionError and leaves p as it was:
// fiber.recovered then keeps the old version, so a crash before the
// fiber's end decides again, and the same way.
func (r *Runner) applyVersion(ctx context.Context, vc versionChange, p *payload, rec *Recovered) error {
	switch vc.policy {
	case VersionFail:
		return &VersionError{ID: rec.ID, Name: rec.Name, From: vc.from, To: vc.to, Policy: vc.policy}
	case VersionRestart:
		p.Version, p.Snapshot, p.Restart = vc.to, json.RawMessage("null"), true
		rec.Snapshot, rec.Restarted = nil, true
		r.metrics.versioned.WithLabelValues(string(VersionRestart)).Inc()
		return nil
	}
	if r.cfg.Hooks.MigrateSnapshot != nil && len(rec.Snapshot) > 0 {
		snap, err := protectValue(func() (json.RawMessage, error) { return r.cfg.Hooks.MigrateSnapshot(ctx, *rec) })
		if err == nil {
			snap, err = encodeJSON("migrated snapshot", snap)
		}
		if err != nil {
			return &VersionError{ID: rec.ID, Name: rec.Name, From: vc.from, To: vc.to, Policy: vc.policy, Err: err}
		}
		p.Snapshot, rec.Snapshot = snap, snap
	}
	p.Version = vc.to
	r.metrics.versioned.WithLabelValues(string(VersionContinue)).Inc()
	return nil
}

// failVersion ends a fiber its version policy (or a failed migration)
// fails: Hooks.OnVersionFailed may end it its own way by resuming it;
// otherwise fiber.failed records verr. It reports whether the fiber is
// settled (false: the hook failed; the caller retries as a new attempt).
func (r *Runner) failVersion(ctx context.Context, row Row, s *slot, rec Recovered, verr *VersionError) (settled bool, err error) {
	r.metrics.versioned.WithLabelValues(string(VersionFail)).Inc()
	if h := r.cfg.Hooks.OnVersionFailed; h != nil {
		err := protect(func() error { return h(ctx, rec, verr) })
		if r.resumed(s) {
			return true, nil
		}
		if err != nil {
			return false, err
		}
	}
	if _, err := r.append(context.WithoutCancel(ctx), EventFailed, payload{ID: row.ID, Error: verr.Error()}); eventlog.OwnerLost(err) {
		r.logger.Info("fiber not failed: this process no longer owns the agent", "fiber", row.ID, "err", err)
	} else if err != nil {
		r.report(ctx, fmt.Errorf("%w: fail fiber %s (%q): %w", ErrOrphaned, row.ID, row.Name, err))
	} else {
		r.metrics.completed.WithLabelValues(outcomeFailed).Inc()
		r.report(ctx, verr)
	}
	r.settle(row.ID, s)
	return true, nil
}

// protectValue calls fn, turning a panic into a *PanicError.
func protectValue[T any](fn func() (T, error)) (v T, err error) {
	err = protect(func() error {
		var ferr error
		v, ferr = fn()
		return ferr
	})
	return v, err
}
