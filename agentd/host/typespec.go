package host

import (
	"context"
	"slices"
	"strings"

	"github.com/forever-agents/forever/agentd"
	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/fiber"
)

// TypeSpec is all the host knows of an agent type, given at once to
// RegisterType. Only Name and Factory are required.
type TypeSpec struct {
	// Name is the type's name, a subject token without ':'; an agent id
	// <Name>:<name> is of this type.
	Name string
	// Factory builds an agent of the type when a command comes for it.
	Factory Factory
	// Verbs are the command verbs the type answers besides the host's own
	// (Verbs). The NATS service has one endpoint per verb of any type; a
	// command with a verb the agent's type does not take is 404, before
	// the agent is activated.
	Verbs []string
	// Internal are the Verbs that agents send one another (a child's
	// notice to its parent): the answer to an unknown verb does not list
	// them among the verbs a client may send.
	Internal []string
	// StatusDetail, if set, details an agent of the type that is not
	// active on this node, for the status command: it reads it from the
	// views (caught up with the agent's last event) without activating it.
	// An active agent answers its status detail itself (CommandHandler).
	StatusDetail func(ctx context.Context, agent string) (any, error)
	// OnDelete, if set, is the type's hook around the delete verb.
	OnDelete OnDelete
	// Forking, if set, is how agents of the type are forked; without it a
	// fork inherits nothing but the reference, and refuses an at.
	Forking *Forking
	// Version, if set, is the type's version and its policy for work
	// another version started; without it the version is the binary's
	// build and the policy continue.
	Version *TypeVersion
}

// amend sets one part of the spec of a type registered before, for the
// Set* calls kept for programs that register in several calls: before the
// daemon starts (agentd.ErrStarted after), for a registered type with a
// valid part (else a 400 of refusal, a format of the type's name), under
// the host's lock.
func (h *Host) amend(typ string, valid bool, refusal string, set func() error) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.mu.ctx != nil {
		return agentd.ErrStarted
	}
	if _, ok := h.types[typ]; !ok || !valid {
		return ErrBadRequest.Wrapf(refusal, typ)
	}
	return set()
}

// RegisterType adds an agent type with everything the host knows of it,
// before the daemon starts. It checks the whole spec first: on an error
// nothing is registered. Errors are 400 (ErrBadRequest) for a bad name,
// verb, policy or a Forking without both functions, 409 (ErrConflict)
// for a name registered before, and agentd.ErrStarted once the daemon
// runs.
func (h *Host) RegisterType(spec TypeSpec) error {
	name := spec.Name
	if !eventlog.ValidToken(name) || strings.Contains(name, ":") || spec.Factory == nil {
		return ErrBadRequest.Wrapf("agent type %q: need a token name without ':' and a factory", name)
	}
	for _, v := range spec.Verbs {
		if !eventlog.ValidToken(v) || slices.Contains(Verbs, v) {
			return ErrBadRequest.Wrapf("agent type %q: verb %q is not a subject token, or is one of the host's (%s)", name, v, strings.Join(Verbs, ", "))
		}
	}
	for _, v := range spec.Internal {
		if !slices.Contains(spec.Verbs, v) {
			return ErrBadRequest.Wrapf("agent type %q: internal verb %q is not one of its verbs", name, v)
		}
	}
	if f := spec.Forking; f != nil && (f.Point == nil || f.Forks == nil) {
		return ErrBadRequest.Wrapf("forking of agent type %q: register the type first, with both functions", name)
	}
	var version TypeVersion
	if spec.Version != nil {
		p, err := fiber.ParseVersionPolicy(string(spec.Version.Policy))
		if err != nil {
			return ErrBadRequest.Wrapf("version of agent type %q: %w", name, err)
		}
		version = *spec.Version
		version.Policy = p
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.mu.ctx != nil {
		return agentd.ErrStarted
	}
	if _, dup := h.types[name]; dup {
		return ErrConflict.Wrapf("agent type %q registered twice", name)
	}
	h.types[name] = spec.Factory
	h.verbs[name] = slices.Clone(spec.Verbs)
	for _, v := range spec.Internal {
		h.unlisted[v] = true
	}
	if spec.StatusDetail != nil {
		h.details[name] = spec.StatusDetail
	}
	if spec.OnDelete != nil {
		h.onDelete[name] = spec.OnDelete
	}
	if spec.Forking != nil {
		h.forking[name] = *spec.Forking
	}
	if spec.Version != nil {
		h.versions[name] = version
	}
	return nil
}
