package auth

// AdminVerbs are the command verbs only a credential of the admin role may
// send (Role.Allows): delete (an agent's events and chunks purged).
// ClientPermissions denies their subjects to every other role, so the
// NATS server enforces it, and the HTTP gateway checks Role.Allows.
var AdminVerbs = []string{"delete"}
