package auth

import "slices"

// Access is what a command verb does, which decides who may send it
// (Role.Allows), whether it counts against a tenant's quotas and whether
// it is audited: a read changes nothing; an approve answers a pending
// approval; a write changes an agent (and may create it); an admin verb is
// the admin's only.
type Access string

// The access classes of the command verbs.
const (
	AccessRead    Access = "read"
	AccessApprove Access = "approve"
	AccessWrite   Access = "write"
	AccessAdmin   Access = "admin"
)

// verbAccess is the one table of the command verbs' access classes
// (forever.cmd.<agent>.<verb>): the host's (status, fibers, schedules,
// log, meta, delete, fork), the chat type's and the steps type's. Roles
// (Role.Verbs, ClientPermissions), quotas (agentd/quota) and the audit
// (agentd/host) read it; a test of agentd/host checks that every verb a
// type of the binary registers is in it. "state" is a write: the same
// verb sets the state; so is "meta", which sets the user context, and
// "budget", which sets an agent's budget (and, without limits, reads it:
// a reader sees the budget in usage's reply).
var verbAccess = map[string]Access{
	"status": AccessRead, "fibers": AccessRead, "schedules": AccessRead, "log": AccessRead,
	"messages": AccessRead, "tools": AccessRead, "approvals": AccessRead, "streams": AccessRead, "usage": AccessRead, "child-turn": AccessRead,
	"approve": AccessApprove,
	"meta":    AccessWrite, "chat": AccessWrite, "cancel": AccessWrite, "interrupt": AccessWrite, "state": AccessWrite,
	"tool-result": AccessWrite, "child-result": AccessWrite, "start": AccessWrite, "budget": AccessWrite, "fork": AccessWrite,
	"delete": AccessAdmin,
}

// VerbAccess returns verb's access class; a verb the table does not name
// (an embedding program's own type) is a write.
func VerbAccess(verb string) Access {
	if a, ok := verbAccess[verb]; ok {
		return a
	}
	return AccessWrite
}

// Classified reports whether the table names verb's access class.
func Classified(verb string) bool {
	_, ok := verbAccess[verb]
	return ok
}

// VerbsOf returns the verbs of access class a, sorted.
func VerbsOf(a Access) []string {
	var out []string
	for v, c := range verbAccess {
		if c == a {
			out = append(out, v)
		}
	}
	slices.Sort(out)
	return out
}

// IsRead reports whether verb is a read: it changes nothing, creates no
// agent and counts none against a quota.
func IsRead(verb string) bool { return VerbAccess(verb) == AccessRead }

// AdminVerbs are the command verbs only a credential of the admin role may
// send (Role.Allows): delete (an agent's events and chunks purged).
// ClientPermissions denies their subjects to every other role, so the
// NATS server enforces it, and the HTTP gateway checks Role.Allows.
var AdminVerbs = VerbsOf(AccessAdmin)
