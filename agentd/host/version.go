package host

import (
	"context"
	"encoding/json"
	"runtime/debug"
	"slices"

	"github.com/forever-agents/forever/fiber"
)

// TypeVersion is an agent type's code version and what a node of that
// version does with work another version started (SetVersion).
type TypeVersion struct {
	// Version names the type's code. "": the binary's build
	// (BuildVersion), so every new build is a new version.
	Version string
	// Policy is what a recovery under this version does with a fiber or
	// a chat turn that last ran under another: fiber.VersionContinue (the
	// default), fiber.VersionRestart or fiber.VersionFail.
	Policy fiber.VersionPolicy
}

// SetVersion sets TypeSpec.Version of a type registered before: its
// version and its policy for work another version started. Kept for
// programs that register in several calls. Call it before the daemon
// starts; a type without one has the binary's build as its version and
// the continue policy.
func (h *Host) SetVersion(typ string, v TypeVersion) error {
	return h.amend(typ, true, "version of agent type %q: register the type first", func() error {
		p, err := fiber.ParseVersionPolicy(string(v.Policy))
		if err != nil {
			return ErrBadRequest.Wrapf("version of agent type %q: %w", typ, err)
		}
		v.Policy = p
		h.versions[typ] = v
		return nil
	})
}

// VersionOf returns the version and policy of agent type typ.
func (h *Host) VersionOf(typ string) TypeVersion {
	v := h.versions[typ]
	if v.Version == "" {
		v.Version = BuildVersion()
	}
	if v.Policy == "" {
		v.Policy = fiber.VersionContinue
	}
	return v
}

// BuildVersion returns the version of the running binary: its module
// version when built from a tagged module, else its VCS revision (12
// hex digits, "+dirty" when built from modified sources), else "devel".
func BuildVersion() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "devel"
	}
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	var rev string
	var dirty bool
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		return "devel"
	}
	rev = rev[:min(len(rev), 12)]
	if dirty {
		rev += "+dirty"
	}
	return rev
}

// agentsOfVersion returns the agents with a fiber started by version v,
// from this node's runs view (every agent's fibers).
func (h *Host) agentsOfVersion(v string) (map[string]bool, error) {
	rows, err := h.table.Rows("")
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, r := range rows {
		if r.Version == v {
			out[r.Agent] = true
		}
	}
	return out, nil
}

// runningVersions returns the versions that started rows, sorted, once
// each; nil when none is versioned.
func runningVersions(rows []fiber.Row) []string {
	var out []string
	for _, r := range rows {
		if r.Version != "" && !slices.Contains(out, r.Version) {
			out = append(out, r.Version)
		}
	}
	slices.Sort(out)
	return out
}

// VersionFailer is implemented by agents that end a fiber its type's
// version policy fails in their own way (a chat turn ends its stream with
// an error chunk and records turn.failed): see fiber.Hooks.OnVersionFailed.
// handled false leaves the fiber to the host, which records fiber.failed.
type VersionFailer interface {
	OnFiberVersionFailed(ctx context.Context, rec fiber.Recovered, cause error) (handled bool, err error)
}

// SnapshotMigrator is implemented by agents whose fibers' snapshots change
// format between versions: under the continue policy, MigrateSnapshot
// converts the snapshot of a fiber that last ran under version rec.From
// before the agent's OnFiberRecovered sees it (fiber.Hooks.MigrateSnapshot).
type SnapshotMigrator interface {
	MigrateSnapshot(ctx context.Context, rec fiber.Recovered) (json.RawMessage, error)
}

// VersionPolicer is implemented by agents whose fibers of some names need
// another version policy than the type's (chat keeps its queued messages):
// FiberVersionPolicy returns it, or "" for the type's.
type VersionPolicer interface {
	FiberVersionPolicy(name string) fiber.VersionPolicy
}

// versionHooks sets the version hooks of an agent's fiber runner: they
// reach the agent once it is built.
func versionHooks(hooks *fiber.Hooks, inst *instance) {
	hooks.MigrateSnapshot = func(ctx context.Context, rec fiber.Recovered) (json.RawMessage, error) {
		if m, ok := inst.agent.(SnapshotMigrator); ok {
			return m.MigrateSnapshot(ctx, rec)
		}
		return rec.Snapshot, nil
	}
	hooks.OnVersionFailed = func(ctx context.Context, rec fiber.Recovered, cause error) error {
		if vf, ok := inst.agent.(VersionFailer); ok {
			_, err := vf.OnFiberVersionFailed(ctx, rec, cause)
			return err
		}
		return nil
	}
}

// policyOf returns the per-name policy of an agent's fibers.
func policyOf(inst *instance) func(name string) fiber.VersionPolicy {
	return func(name string) fiber.VersionPolicy {
		if vp, ok := inst.agent.(VersionPolicer); ok {
			return vp.FiberVersionPolicy(name)
		}
		return ""
	}
}
