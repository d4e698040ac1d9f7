package host

import (
	"context"

	"github.com/nats-io/nats.go/micro"

	"github.com/forever-agents/forever/agents"
)

// ListSubject is the subject of the listing on the NATS service:
// <prefix>.list. Its payload is an agents.Query ({"user", "tag", "type",
// "cursor", "limit"}, all optional), its reply an agents.Page
// ({"agents": [...], "next": "..."}). Any node answers it from its own
// view; a tenant's credential lists its tenant's agents only (its own
// account).
func ListSubject(prefix string) string { return prefix + ".list" }

// serveList answers a listing request, admitted (admit) like a command.
func (h *Host) serveList(ctx context.Context, req micro.Request) {
	var q agents.Query
	if err := decodePayload(req.Data(), &q); err != nil {
		RespondError(req, err)
		return
	}
	page, err := h.List(ctx, q)
	if err != nil {
		RespondError(req, err)
		return
	}
	if err := req.RespondJSON(page); err != nil {
		h.logger.Warn("respond", "subject", req.Subject(), "err", err)
	}
}
