package auth

import "slices"

// AdminVerbs are the command verbs only the admin may send: delete (an
// agent's events and chunks purged). ClientMay refuses them to a tenant's
// client credential.
var AdminVerbs = []string{"delete"}

// ClientMay reports whether a tenant's client credential may send the
// command verb (forever.cmd.<agent>.<verb>): every verb but AdminVerbs.
// It is the one permission check of commands under --auth, enforced by
// the NATS server: ClientPermissions denies the subjects of the verbs it
// refuses, and the admin reaches them through the admin service. Roles
// (reader, writer, approver, admin) would decide here which verbs each
// credential may send.
func ClientMay(verb string) bool { return !slices.Contains(AdminVerbs, verb) }
