// Package console is agentd's web console: one page, GET /console, plain
// HTML, CSS and JavaScript embedded in the binary (no build step, no CDN:
// it works offline), that shows the agents, an agent's conversation,
// fibers and steps on a time axis with recoveries marked, pending
// approvals (approve and deny), usage, state and event log, a chat
// stream replayed from any cursor, and the cluster.
//
// The page holds no data and reads only through the endpoints other
// clients use (GET /v1/agents, /v1/agents/{id}/status, /fibers, /log,
// /approvals, /streams, /usage, /events, /v1/agents/{id}/streams/{stream}
// /chunks, /v1/chat/{id}/messages, /v1/cluster, and POST
// /v1/agents/{id}/approvals/{toolCallId}). So it is served without a token
// also under --auth: there it asks for a tenant's API token on the first
// 401, keeps it in the tab's session storage, and every read is scoped to
// that tenant by the tenants' front door, as for any client.
//
// Views refresh by polling every two seconds while shown.
//
// # Usage
//
//	d.Handle("GET /console", console.Handler())
package console
