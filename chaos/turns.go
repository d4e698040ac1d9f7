package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/forever-agents/forever/agentd/chathost"
	"github.com/forever-agents/forever/chat/chunk"
)

// turnsWait bounds how long checkTurns waits for the turns of
// acknowledged commands to end once the load stopped.
const turnsWait = 90 * time.Second

// turnStats is what checkTurns read.
type turnStats struct {
	// acked are the acknowledged commands; resent those sent more than
	// once (by their client or by resendInFlight), answered more than
	// once.
	acked, resent, answered int
}

// checkTurns checks that each acknowledged chat command got exactly one
// outcome: every reply it got, however often it was sent and to whichever
// node, names the same turn (request id and stream), and the agent's
// streams (the streams verb, as a client reads them) hold exactly one
// stream of that request id, which ended. It waits up to turnsWait for
// turns still running when the load stopped. It returns the problems
// found, as sentences, and what it read.
func (l *load) checkTurns(ctx context.Context, c *client) ([]string, turnStats, error) {
	l.mu.Lock()
	sent := map[string][]sentChat{}
	for agent, s := range l.mu.sent {
		sent[agent] = append([]sentChat(nil), s...)
	}
	l.mu.Unlock()
	problems, st := oneTurnPerCommand(sent)
	deadline := time.Now().Add(turnsWait)
	for _, agent := range sortedKeys(sent) {
		var found []string
		for {
			streams, err := l.streams(ctx, c, agent)
			if err != nil {
				return problems, st, err
			}
			found = streamProblems(agent, sent[agent], streams)
			if len(found) == 0 || time.Now().After(deadline) || ctx.Err() != nil {
				break
			}
			sleep(ctx, time.Second)
		}
		problems = append(problems, found...)
	}
	return problems, st, nil
}

// oneTurnPerCommand checks that each command's replies name one turn.
func oneTurnPerCommand(sent map[string][]sentChat) ([]string, turnStats) {
	var problems []string
	var st turnStats
	for _, agent := range sortedKeys(sent) {
		for _, s := range sent[agent] {
			if !s.acked {
				continue
			}
			st.acked++
			if s.sends > 1 {
				st.resent++
			}
			if len(s.acks) > 1 {
				st.answered++
			}
			first := s.acks[0]
			for _, a := range s.acks[1:] {
				if a != first {
					problems = append(problems, fmt.Sprintf("%s: the command %s (sent with %s, %d times) was answered with two turns: request %s stream %s, then request %s stream %s",
						agent, s.marker, s.mode, s.sends, first.request, first.stream, a.request, a.stream))
					break
				}
			}
		}
	}
	return problems, st
}

// streamProblems checks that each acknowledged command of agent has
// exactly one stream of its request id among streams, and that it ended.
func streamProblems(agent string, sent []sentChat, streams []chathost.Stream) []string {
	byRequest := map[string][]chathost.Stream{}
	byID := map[string]chathost.Stream{}
	for _, s := range streams {
		byID[s.Stream] = s
		if s.RequestID != "" {
			byRequest[s.RequestID] = append(byRequest[s.RequestID], s)
		}
	}
	var problems []string
	for _, s := range sent {
		if !s.acked {
			continue
		}
		got := byRequest[s.request]
		switch {
		case len(got) == 0:
			what := "no stream is stored under its reply's stream id either: no turn answers it"
			if st, ok := byID[s.acks[0].stream]; ok {
				what = fmt.Sprintf("its reply's stream %s has no start chunk naming it (%s, %d chunks)", st.Stream, st.Status, st.Chunks)
			}
			problems = append(problems, fmt.Sprintf("%s: the command %s (sent with %s, %d times) was acknowledged as request %s, which has no stream: %s",
				agent, s.marker, s.mode, s.sends, s.request, what))
		case len(got) > 1:
			var ids []string
			for _, g := range got {
				ids = append(ids, g.Stream+" ("+g.Status+")")
			}
			problems = append(problems, fmt.Sprintf("%s: the command %s (sent with %s, %d times), request %s, has %d streams: %s; a request runs one turn",
				agent, s.marker, s.mode, s.sends, s.request, len(got), strings.Join(ids, ", ")))
		case got[0].Status == chunk.StatusStreaming:
			problems = append(problems, fmt.Sprintf("%s: the command %s (sent with %s, %d times), request %s: its stream %s never ended (%d chunks)",
				agent, s.marker, s.mode, s.sends, s.request, got[0].Stream, got[0].Chunks))
		}
	}
	return problems
}

// streams reads all of agent's streams (the streams verb), page by page,
// retrying a page a while when its command fails.
func (l *load) streams(ctx context.Context, c *client, agent string) ([]chathost.Stream, error) {
	var out []chathost.Stream
	cursor := ""
	for {
		var page chathost.StreamsPage
		var err error
		for range 30 {
			if _, err = l.request(ctx, c, agent, "streams", "", chathost.StreamsRequest{Cursor: cursor, Limit: chathost.MaxStreamsLimit}, &page); err == nil {
				break
			}
			sleep(ctx, time.Second)
		}
		if err != nil {
			return out, fmt.Errorf("streams of %s after %q: %w", agent, cursor, err)
		}
		out = append(out, page.Streams...)
		if page.Next == "" {
			return out, nil
		}
		cursor = page.Next
	}
}
