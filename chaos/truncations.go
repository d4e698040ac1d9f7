package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/forever-agents/forever/chat"
	"github.com/forever-agents/forever/eventlog"
)

// truncations says, for a conversation check's problem, which of agent's
// stored events removed messages: each messages.truncated with its
// sequence, writer and kept message, and the request of the turn.started
// after it (a rollback's or a rewrite's own turn). Events a compaction
// deleted are not there to read; the sentence says how far it read.
func (l *load) truncations(ctx context.Context, c *client, agent string) string {
	f := eventlog.Filter{Agent: agent}
	var out []string
	pending := -1 // the truncation waiting for its turn.started
	var after eventlog.Seq
	for {
		evs, err := c.lg.NextBatch(ctx, f, after, 500)
		if err != nil {
			out = append(out, fmt.Sprintf("read stopped after seq %d: %v", after, err))
			break
		}
		if len(evs) == 0 {
			break
		}
		for _, e := range evs {
			after = e.Seq
			switch e.Type {
			case chat.EventMessagesTruncated:
				var t struct {
					AfterID string `json:"afterId"`
				}
				_ = json.Unmarshal(e.Data, &t)
				out = append(out, fmt.Sprintf("seq %d by %s after message %q", e.Seq, e.Writer.Node, t.AfterID))
				pending = len(out) - 1
			case chat.EventTurnStarted:
				if pending >= 0 {
					var t struct {
						RequestID string `json:"requestId"`
					}
					_ = json.Unmarshal(e.Data, &t)
					out[pending] += " before turn " + t.RequestID
					pending = -1
				}
			}
		}
	}
	if len(out) == 0 {
		return "no truncation stored"
	}
	return "truncations: " + strings.Join(out, "; ")
}
