package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/forever-agents/forever/eventlog"
)

// Conversation-growth scenario parameters, at -n 1.
const (
	// conversationTurns is how many turns one agent takes; -n scales it
	// (-n 0.1: 100 turns).
	conversationTurns = 1000
	// conversationUserBytes is the size of each user message's text.
	conversationUserBytes = 2000
	// conversationWindow is how many turns a bytes-per-turn figure is the
	// mean of: a turn's bytes vary by the other records of the moment
	// (heartbeats, stashes, compaction).
	conversationWindow = 10
	// conversationEarly is the turn the early window is centred on.
	conversationEarly = 10
	// conversationGrowthTarget: the late window's bytes per turn within
	// 1.2x of the early window's.
	conversationGrowthTarget = 1 / 1.2
	// conversationContentTarget: the conversation's stored bytes within 2x
	// of its content.
	conversationContentTarget = 1 / 2.0
	// conversationAgent is the one agent (the chat's id).
	conversationAgent = "conversation"
)

// conversationGrowth measures what a long conversation stores when its
// client sends the whole history with every request, as the AI SDK's
// useChat does: one agentd (local model at full speed), one agent, and
// conversationTurns turns through POST /v1/chat, each body the whole
// conversation so far plus a new user message of conversationUserBytes.
// The client keeps the conversation as useChat does, adding after each turn
// the messages the server stored (GET /v1/chat/{id}/messages?after=, so
// that reading it back does not grow with the conversation either).
//
// Around every turn it reads the FOREVER_EVENTS and FOREVER_CHUNKS streams'
// stored bytes (stream info). Figures: the events bytes per turn over the
// last conversationWindow turns against the window around turn
// conversationEarly (target within 1.2x), and the events bytes the whole
// conversation stored against its content, the JSON of its messages as GET
// /v1/chat/{id}/messages returns them (target within 2x); the chunks
// stream's bytes per turn beside them, without a target. A body the gateway
// refuses as too large (413, past its body limit) ends the run early: the
// figures are then those of the turns answered, and a fourth row, turns
// answered against turns sent, misses its target. With -v it logs,
// per event type, the records and bytes of the last window's turns.
func conversationGrowth(ctx context.Context, env *Env) (res Result, err error) {
	turns := env.Count(conversationTurns, conversationTurns)
	window := min(conversationWindow, max(1, turns/3))
	early := min(max(conversationEarly, window/2+1), turns-window/2) // centre of the early window
	eFrom, eTo := early-window/2, early-window/2+window-1
	p, nc, stop, err := env.runAgentd(ctx, "--local-rate", "-1", "--log-level", "warn")
	if err != nil {
		return Result{}, err
	}
	defer func() { err = errors.Join(err, stop()) }()
	js, err := jetstream.New(nc)
	if err != nil {
		return Result{}, fmt.Errorf("bench: %w", err)
	}
	ls, err := eventlog.ReadStreams(ctx, js)
	if err != nil {
		return Result{}, fmt.Errorf("bench: %w", err)
	}
	// The one agent's streams: of a sharded agentd, its shard's.
	eventsStream, chunksStream := ls.EventsOf(conversationAgent), ls.ChunksOf(conversationAgent)
	c := &conversationClient{base: "http://" + p.httpAddr, http: &http.Client{Timeout: 2 * time.Minute}}

	type sample struct {
		events, chunks uint64
		lastSeq        uint64 // FOREVER_EVENTS' last sequence
	}
	measure := func() (sample, error) {
		ev, err := streamState(ctx, js, eventsStream)
		if err != nil {
			return sample{}, err
		}
		ch, err := streamState(ctx, js, chunksStream)
		if err != nil {
			return sample{}, err
		}
		return sample{events: ev.Bytes, chunks: ch.Bytes, lastSeq: ev.LastSeq}, nil
	}
	// samples[i] is taken before turn i+1; samples[turns] after the last.
	samples := make([]sample, 0, turns+1)
	s, err := measure()
	if err != nil {
		return Result{}, err
	}
	samples = append(samples, s)
	began := time.Now()
	var refused *refusedTurn
	for i := 1; i <= turns; i++ {
		if err := c.turn(ctx, i); errors.As(err, &refused) && refused.status == http.StatusRequestEntityTooLarge && i > eTo+window {
			// The body outgrew the gateway's limit: the figures are those
			// of the turns answered, and a row says how many that was.
			env.Logger.Warn("conversation-growth: stopped", "error", err)
			break
		} else if err != nil {
			return Result{}, err
		}
		s, err := measure()
		if err != nil {
			return Result{}, err
		}
		samples = append(samples, s)
		if i%100 == 0 {
			env.Logger.Info("conversation-growth", "turn", i, "body bytes", c.lastBody, "events bytes", s.events, "took", time.Since(began).Round(time.Second))
		}
	}
	// perTurn is the mean bytes per turn of turns from..to (1-based).
	perTurn := func(from, to int, f func(sample) uint64) float64 {
		return float64(f(samples[to])-f(samples[from-1])) / float64(to-from+1)
	}
	events := func(s sample) uint64 { return s.events }
	chunks := func(s sample) uint64 { return s.chunks }
	answered := len(samples) - 1
	lFrom, lTo := answered-window+1, answered
	content, err := c.contentBytes(ctx)
	if err != nil {
		return Result{}, err
	}
	stored := float64(samples[answered].events - samples[0].events)
	if env.Logger.Enabled(ctx, slog.LevelInfo) {
		logEventTypes(ctx, env, js, eventsStream, samples[lFrom-1].lastSeq, samples[lTo].lastSeq, lTo-lFrom+1)
	}
	env.Logger.Info("conversation-growth: done", "turns", answered, "took", time.Since(began).Round(time.Second),
		"content bytes", content, "events bytes", uint64(stored), "last body bytes", c.lastBody)
	lateLabel := fmt.Sprintf("FOREVER_EVENTS bytes/turn, turns %d-%d", lFrom, lTo)
	earlyLabel := fmt.Sprintf("turns %d-%d", eFrom, eTo)
	return Result{Rows: []Row{
		{Figure: lateLabel, Value: perTurn(lFrom, lTo, events),
			Baseline: earlyLabel, BaselineValue: perTurn(eFrom, eTo, events), LowerIsBetter: true,
			Target: conversationGrowthTarget, TargetNote: "within 1.2x"},
		{Figure: fmt.Sprintf("FOREVER_EVENTS bytes, whole conversation (%d turns)", answered), Value: stored,
			Baseline: "content (messages' JSON)", BaselineValue: float64(content), LowerIsBetter: true,
			Target: conversationContentTarget, TargetNote: "within 2x"},
		{Figure: fmt.Sprintf("FOREVER_CHUNKS bytes/turn, turns %d-%d", lFrom, lTo), Value: perTurn(lFrom, lTo, chunks),
			Baseline: earlyLabel, BaselineValue: perTurn(eFrom, eTo, chunks), LowerIsBetter: true},
		{Figure: "turns answered, the whole history in every body", Value: float64(answered),
			Baseline: "turns sent", BaselineValue: float64(turns), Target: 1, TargetNote: "every turn"},
	}}, nil
}

// streamState returns a stream's state from its info.
func streamState(ctx context.Context, js jetstream.JetStream, name string) (jetstream.StreamState, error) {
	s, err := js.Stream(ctx, name)
	if err != nil {
		return jetstream.StreamState{}, fmt.Errorf("bench: stream %s: %w", name, err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		return jetstream.StreamState{}, fmt.Errorf("bench: stream %s info: %w", name, err)
	}
	return info.State, nil
}

// directGetHeader names the headers a message read by sequence carries
// that its stored form does not.
var directGetHeader = map[string]bool{
	"Nats-Stream": true, "Nats-Sequence": true, "Nats-Time-Stamp": true, "Nats-Subject": true, "Nats-Last-Sequence": true,
}

// logEventTypes logs, per event type, how many records FOREVER_EVENTS holds
// in sequences (from, to] and their bytes per turn (subject, headers and
// data, as the file store counts them less its 30 or so bytes of framing per
// record): what a turn stores.
func logEventTypes(ctx context.Context, env *Env, js jetstream.JetStream, stream string, from, to uint64, turns int) {
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return
	}
	type tally struct {
		n, bytes, headers int
		largest           int
	}
	byType := map[string]*tally{}
	for seq := from + 1; seq <= to; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			continue // deleted (retention, compaction)
		}
		typ := m.Header.Get(eventlog.HeaderType)
		if typ == "" {
			typ = "(no type) " + m.Subject
		}
		hdr := len("NATS/1.0\r\n\r\n")
		for k, vs := range m.Header {
			if directGetHeader[k] {
				continue // added by the read, not stored
			}
			for _, v := range vs {
				hdr += len(k) + len(": \r\n") + len(v)
			}
		}
		size := len(m.Subject) + hdr + len(m.Data)
		t := byType[typ]
		if t == nil {
			t = &tally{}
			byType[typ] = t
		}
		t.n++
		t.bytes += size
		t.headers += hdr
		t.largest = max(t.largest, size)
	}
	types := make([]string, 0, len(byType))
	for k := range byType {
		types = append(types, k)
	}
	slices.SortFunc(types, func(a, b string) int { return byType[b].bytes - byType[a].bytes })
	for _, k := range types {
		t := byType[k]
		env.Logger.Info("conversation-growth: events per turn", "type", k,
			"records/turn", float64(t.n)/float64(turns), "bytes/turn", t.bytes/turns,
			"of which headers", t.headers/turns, "largest", t.largest)
	}
}

// conversationClient is a chat client that keeps the conversation and sends
// all of it with every request, as useChat does.
type conversationClient struct {
	base string
	http *http.Client
	// history is the messages so far, each one's JSON, comma-separated.
	history  bytes.Buffer
	lastID   string // the last message's id
	lastBody int    // the size of the last request's body
}

// turn sends the whole conversation and a new user message, reads the
// answer's stream to its end, and adds what the server stored.
func (c *conversationClient) turn(ctx context.Context, i int) error {
	text := fmt.Sprintf("turn %d ", i)
	text += strings.Repeat("w", max(0, conversationUserBytes-len(text)))
	user, _ := json.Marshal(map[string]any{"id": fmt.Sprintf("u%d", i), "role": "user",
		"parts": []map[string]string{{"type": "text", "text": text}}})
	var body bytes.Buffer
	fmt.Fprintf(&body, `{"id":%q,"trigger":"submit-message","messages":[`, conversationAgent)
	if c.history.Len() > 0 {
		body.Write(c.history.Bytes())
		body.WriteByte(',')
	}
	body.Write(user)
	body.WriteString("]}")
	c.lastBody = body.Len()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+"/v1/chat", &body)
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("bench: turn %d: %w", i, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return &refusedTurn{turn: i, body: c.lastBody, status: resp.StatusCode, reply: string(b)}
	}
	done := false
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if sc.Text() == "data: [DONE]" {
			done = true
		}
	}
	if !done {
		return fmt.Errorf("bench: turn %d: the stream ended without [DONE] (%v)", i, sc.Err())
	}
	return c.catchUp(ctx)
}

// catchUp adds the messages stored after the last one the client has.
func (c *conversationClient) catchUp(ctx context.Context) error {
	after := c.lastID
	for {
		page, err := c.page(ctx, after)
		if err != nil {
			return err
		}
		for _, m := range page.Messages {
			var id struct{ ID string }
			json.Unmarshal(m, &id)
			if c.history.Len() > 0 {
				c.history.WriteByte(',')
			}
			c.history.Write(m)
			c.lastID = id.ID
		}
		if page.Next == "" {
			return nil
		}
		after = page.Next
	}
}

type messagesPage struct {
	Messages []json.RawMessage `json:"messages"`
	Next     string            `json:"next"`
}

func (c *conversationClient) page(ctx context.Context, after string) (messagesPage, error) {
	u := c.base + "/v1/chat/" + conversationAgent + "/messages?limit=1000"
	if after != "" {
		u += "&after=" + url.QueryEscape(after)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return messagesPage{}, fmt.Errorf("bench: %w", err)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return messagesPage{}, fmt.Errorf("bench: messages: %w", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		return messagesPage{}, fmt.Errorf("bench: messages: %d %s %v", resp.StatusCode, b, err)
	}
	var page messagesPage
	if err := json.Unmarshal(b, &page); err != nil {
		return messagesPage{}, fmt.Errorf("bench: messages: %w", err)
	}
	return page, nil
}

// contentBytes returns the size of the conversation as the server returns
// it, every page: each message's JSON.
func (c *conversationClient) contentBytes(ctx context.Context) (int, error) {
	n, after := 0, ""
	for {
		page, err := c.page(ctx, after)
		if err != nil {
			return 0, err
		}
		for _, m := range page.Messages {
			n += len(m)
		}
		if page.Next == "" {
			return n, nil
		}
		after = page.Next
	}
}

// refusedTurn is a turn the gateway answered with an error status.
type refusedTurn struct {
	turn, body, status int
	reply              string
}

func (e *refusedTurn) Error() string {
	return fmt.Sprintf("bench: turn %d (a body of %d bytes): %d %s", e.turn, e.body, e.status, e.reply)
}
