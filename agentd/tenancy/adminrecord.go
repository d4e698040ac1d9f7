package tenancy

import (
	"context"
	"encoding/json"
	"slices"

	"github.com/forever-agents/forever/agentd/audit"
	"github.com/forever-agents/forever/agentd/host"
	"github.com/forever-agents/forever/auth"
)

// AdminAuditSubject records in the audit log, as the admin, what the
// admin did with the operator's keys or its credential outside agentd:
// minting an admin credential or token (agentd auth admin-creds,
// admin-token) and restoring a backup (agentd restore). Only the admin
// credential reaches it, like every forever.admin subject.
const AdminAuditSubject = "forever.admin.audit.record"

// AuditRecordRequest is the payload of AdminAuditSubject: one of
// AdminAuditActions, its outcome (audit.OK by default, audit.Failed) and
// a one-line detail; Tenants are the tenants it concerned (one record
// each; none: one record for the node).
type AuditRecordRequest struct {
	Action  string   `json:"action"`
	Outcome string   `json:"outcome,omitempty"`
	Detail  string   `json:"detail,omitempty"`
	Tenants []string `json:"tenants,omitempty"`
}

// AdminAuditActions are the actions AdminAuditSubject records.
var AdminAuditActions = []string{"admin.creds", "admin.token", "restore"}

// handleAuditRecord records an AuditRecordRequest as the admin.
func (ts *tenantSet) handleAuditRecord(_ context.Context, data []byte) (any, error) {
	var req AuditRecordRequest
	if err := json.Unmarshal(data, &req); err != nil {
		return nil, host.ErrBadRequest.Wrapf("audit record: %v", err)
	}
	if !slices.Contains(AdminAuditActions, req.Action) {
		return nil, host.ErrBadRequest.Wrapf("audit record: action %q is none of %v", req.Action, AdminAuditActions)
	}
	if req.Outcome == "" {
		req.Outcome = audit.OK
	}
	if req.Outcome != audit.OK && req.Outcome != audit.Failed {
		return nil, host.ErrBadRequest.Wrapf("audit record: outcome %q is neither %s nor %s", req.Outcome, audit.OK, audit.Failed)
	}
	for _, t := range req.Tenants {
		if err := auth.CheckName(t); err != nil {
			return nil, refused(host.ErrBadRequest, err, "audit record: %s")
		}
	}
	tenants := req.Tenants
	if len(tenants) == 0 {
		tenants = []string{""}
	}
	for _, t := range tenants {
		ts.audit.Record(audit.Record{Tenant: t, Cred: AdminCred, Role: string(auth.RoleAdmin), Action: req.Action,
			Outcome: req.Outcome, Detail: clip(req.Detail)})
	}
	return map[string]int{"recorded": len(tenants)}, nil
}
