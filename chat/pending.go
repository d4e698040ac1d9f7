package chat

import (
	"encoding/json"
	"time"
)

// PendingApproval is a tool call of an agent's last assistant message that
// waits for a person's approval: answer it with Agent.Answer (the approve
// verb, or POST /v1/chat with the approval).
type PendingApproval struct {
	ToolCallID string          `json:"toolCallId"`
	ApprovalID string          `json:"approvalId,omitempty"`
	ToolName   string          `json:"toolName"`
	Input      json.RawMessage `json:"input,omitempty"`
	// MessageID is the assistant message that waits, RequestID the turn
	// that asked, RequestedAt when that turn ended to wait.
	MessageID   string    `json:"messageId"`
	RequestID   string    `json:"requestId,omitempty"`
	RequestedAt time.Time `json:"requestedAt,omitzero"`
	// Kind is "budget" (ApprovalKindBudget) for a turn parked at a soft
	// budget limit, which has no tool call: its ToolCallID is its
	// ApprovalID, and Reason says which limit. Empty for a tool call.
	Kind   string `json:"kind,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// PendingApprovals lists the calls of the agent's last assistant message
// that wait for approval, in the message's order; none while no turn
// asked. Only the last assistant message can wait: a new user message
// ends the wait (its calls are then denied to the model). A turn parked
// at a soft budget limit (PendingBudget) comes first, kind "budget".
func (s *Store) PendingApprovals(agent string) ([]PendingApproval, error) {
	out := []PendingApproval{}
	if p, ok, err := s.PendingBudget(agent); err != nil {
		return out, err
	} else if ok {
		// The approval id stands in for the call id too, so a client that
		// answers by call id (POST .../approvals/{toolCallId}) answers it.
		pa := PendingApproval{ToolCallID: p.ApprovalID, ApprovalID: p.ApprovalID, ToolName: "budget", RequestID: p.RequestID,
			RequestedAt: p.ParkedAt, Kind: ApprovalKindBudget, Reason: p.Reason}
		if t, err := s.Turn(agent, p.RequestID); err == nil {
			pa.MessageID = t.AssistantMessageID
		}
		out = append(out, pa)
	}
	history, err := s.History(agent)
	if err != nil {
		return out, err
	}
	var last *Message
	for i := len(history) - 1; i >= 0; i-- {
		if history[i].Role == RoleAssistant && !history[i].Hidden {
			last = &history[i]
			break
		}
	}
	if last == nil {
		return out, nil
	}
	var at time.Time
	if last.RequestID != "" {
		if t, err := s.Turn(agent, last.RequestID); err == nil {
			at = t.EndedAt
		}
	}
	for _, p := range last.Parts {
		if p.Type != PartTool || p.State != ToolApprovalRequested {
			continue
		}
		pa := PendingApproval{ToolCallID: p.ToolCallID, ToolName: p.ToolName, Input: p.Input, MessageID: last.ID,
			RequestID: last.RequestID, RequestedAt: at}
		if p.Approval != nil {
			pa.ApprovalID = p.Approval.ID
		}
		out = append(out, pa)
	}
	return out, nil
}
