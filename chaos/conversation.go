package main

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"time"

	"github.com/forever-agents/forever/chat"
)

// markerRE finds a chat command's marker in a user message's text.
var markerRE = regexp.MustCompile(`\[chaos-chat-\d+ #\d+\]`)

// conversationPage is how many messages one "messages" command asks for.
const conversationPage = 100

// checkConversations reads each chat agent's conversation (the messages
// verb, as a client reads it) and checks what the log's invariants cannot
// show across compactions: every command the load sent is stored at most
// once, and every acknowledged one exactly once (its marker is in exactly
// one user message); and each user message is answered by at most one
// assistant message. It returns the problems found, as sentences, and
// what it read.
func (l *load) checkConversations(ctx context.Context, c *client) ([]string, conversationStats, error) {
	l.mu.Lock()
	sent := map[string][]sentChat{}
	for agent, s := range l.mu.sent {
		sent[agent] = append([]sentChat(nil), s...)
	}
	l.mu.Unlock()
	var problems []string
	var st conversationStats
	for _, agent := range sortedKeys(sent) {
		msgs, err := l.conversation(ctx, c, agent)
		if err != nil {
			return problems, st, err
		}
		st.messages += len(msgs)
		stored := map[string]int{}
		requestOf := map[string]string{} // marker -> its user message's turn
		replies := 0                     // assistant messages since the last user message
		last := ""                       // that user message's id
		for _, m := range msgs {
			switch m.Role {
			case chat.RoleUser:
				for _, mk := range markerRE.FindAllString(m.Text(), -1) {
					stored[mk]++
					requestOf[mk] = m.RequestID
				}
				if last != "" && replies == 0 {
					st.unanswered++
				}
				replies, last = 0, m.ID
				st.users++
			case chat.RoleAssistant:
				if replies++; replies == 2 {
					problems = append(problems, fmt.Sprintf("%s: user message %s is answered by more than one assistant message (%s is the second)", agent, last, m.ID))
				}
			}
		}
		if last != "" && replies == 0 {
			st.unanswered++
		}
		why := "" // the agent's truncations, read once for its first missing command
		for _, s := range sent[agent] {
			n := stored[s.marker]
			switch {
			case n > 1:
				problems = append(problems, fmt.Sprintf("%s: the command %s (sent with %s, acknowledged %v, request %s) is stored %d times", agent, s.marker, s.mode, s.acked, s.request, n))
			case n == 0 && s.acked && s.mayBeRolledBack:
				st.rolledBack++
			case n == 1 && s.acked && requestOf[s.marker] != s.request:
				// Each message is answered by the turn its reply named: its
				// own (enqueue, interrupt, rollback), the running one it
				// was steered into, or its batch's (merge, debounce).
				problems = append(problems, fmt.Sprintf("%s: the command %s (sent with %s, multitask %q) was acknowledged with turn %s but is stored in turn %s",
					agent, s.marker, s.mode, s.policy, s.request, requestOf[s.marker]))
			case n == 0 && s.acked:
				if why == "" {
					why = l.truncations(ctx, c, agent)
				}
				problems = append(problems, fmt.Sprintf("%s: the command %s (sent with %s, request %s) was acknowledged but is not in the conversation (%s)", agent, s.marker, s.mode, s.request, why))
			}
		}
	}
	return problems, st, nil
}

// conversationStats is what checkConversations read.
type conversationStats struct {
	messages, users int
	// unanswered counts user messages with no assistant message after
	// them: a turn that failed before its answer was stored (verify
	// checks that each has a turn with an outcome).
	unanswered int
	// rolledBack counts acknowledged commands a later "rollback" of their
	// round removed from the conversation, as that policy does.
	rolledBack int
}

// conversation reads agent's whole conversation, page by page, retrying a
// page a while when its command fails.
func (l *load) conversation(ctx context.Context, c *client, agent string) ([]chat.Message, error) {
	var out []chat.Message
	after := ""
	for {
		var page struct {
			Messages []chat.Message `json:"messages"`
			Next     string         `json:"next"`
		}
		var err error
		for range 30 {
			if _, err = l.request(ctx, c, agent, "messages", "", map[string]any{"after": after, "limit": conversationPage}, &page); err == nil {
				break
			}
			sleep(ctx, time.Second)
		}
		if err != nil {
			return out, fmt.Errorf("messages of %s after %q: %w", agent, after, err)
		}
		out = append(out, page.Messages...)
		if page.Next == "" {
			return out, nil
		}
		after = page.Next
	}
}

// sortedKeys returns m's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
