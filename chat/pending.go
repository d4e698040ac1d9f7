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
}

// PendingApprovals lists the calls of the agent's last assistant message
// that wait for approval, in the message's order; none while no turn
// asked. Only the last assistant message can wait: a new user message
// ends the wait (its calls are then denied to the model).
func (s *Store) PendingApprovals(agent string) ([]PendingApproval, error) {
	out := []PendingApproval{}
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
