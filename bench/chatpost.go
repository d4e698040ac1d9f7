package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/forever-agents/forever/eventlog"
)

// Chat-post scenario parameters, at -n 1.
const (
	chatPostTurns = 400 // POST /v1/chat per series
	chatPostReads = 400 // the follow check's two reads per series
	chatPostAgent = "post"
)

// chatPost times POST /v1/chat through the HTTP gateway of one agentd (the
// local model at full speed, one agent), from the request to the stream's
// data: [DONE], each body one new user message. Beside it, in alternating
// rounds on the same agentd, the two JetStream API reads a gateway makes
// before it starts a turn to check that the turn's stream can be followed
// (the account's info and FOREVER_CHUNKS' info), from a client of the same
// account: what that check can add to a turn at most. Run against a build
// without the check for the POST's figure before it.
func chatPost(ctx context.Context, env *Env) (res Result, err error) {
	turns, reads := env.Count(chatPostTurns, chatPostTurns), env.Count(chatPostReads, chatPostReads)
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
	chunksStream := ls.ChunksOf(chatPostAgent) // its shard's, when sharded
	hc := &http.Client{Timeout: time.Minute}
	base := "http://" + p.httpAddr
	i := 0
	post := func() error {
		i++
		return postTurn(ctx, hc, base, i)
	}
	check := func() error {
		if _, err := js.AccountInfo(ctx); err != nil {
			return fmt.Errorf("bench: account info: %w", err)
		}
		s, err := js.Stream(ctx, chunksStream)
		if err != nil {
			return fmt.Errorf("bench: stream info: %w", err)
		}
		_ = s.CachedInfo()
		return nil
	}
	var posts, checks, w series
	// Each turn ends (GET /v1/chat/{id}/stream answers 204) before the
	// next is sent, untimed: its last records follow its data: [DONE]. A
	// post the agent still answers 409 (its turn slot is let go just
	// after the view shows the turn ended) is sent again, untimed.
	turnsOf := func(s *series, k int) error {
		for range k {
			err := s.sequential(1, post)
			for retry := 0; errors.Is(err, errTurnActive) && retry < 100; retry++ {
				time.Sleep(time.Millisecond)
				err = s.sequential(1, post)
			}
			if err != nil {
				return err
			}
			if err := awaitNoTurn(ctx, hc, base); err != nil {
				return err
			}
		}
		return nil
	}
	if err := errors.Join(turnsOf(&w, 10), w.sequential(10, check)); err != nil {
		return Result{}, fmt.Errorf("warm up: %w", err)
	}
	rounds := roundsOf(turns, 50)
	if err := alternate(rounds,
		func(r int) error { return checks.sequential(split(reads, rounds, r), check) },
		func(r int) error { return turnsOf(&posts, split(turns, rounds, r)) },
	); err != nil {
		return Result{}, err
	}
	const bl = "account info + stream info"
	return Result{Rows: []Row{
		{Figure: "POST /v1/chat to [DONE] p50 us", Value: micros(percentile(posts.lat, 50)),
			Baseline: bl + ", p50 us", BaselineValue: micros(percentile(checks.lat, 50)), LowerIsBetter: true},
		{Figure: "POST /v1/chat to [DONE] p99 us", Value: micros(percentile(posts.lat, 99)),
			Baseline: bl + ", p99 us", BaselineValue: micros(percentile(checks.lat, 99)), LowerIsBetter: true},
	}}, nil
}

// errTurnActive is a post answered 409: the agent's last turn holds its
// slot still.
var errTurnActive = errors.New("the agent's turn is still active")

// postTurn sends user message i to chatPostAgent and reads the answer's
// stream to data: [DONE].
func postTurn(ctx context.Context, hc *http.Client, base string, i int) error {
	return postTurnTo(ctx, hc, base, chatPostAgent, i)
}

// postTurnTo sends user message i to agent and reads the answer's stream
// to data: [DONE].
func postTurnTo(ctx context.Context, hc *http.Client, base, agent string, i int) error {
	user, _ := json.Marshal(map[string]any{"id": fmt.Sprintf("u%d", i), "role": "user",
		"parts": []map[string]string{{"type": "text", "text": fmt.Sprintf("bench post %d", i)}}})
	var body bytes.Buffer
	fmt.Fprintf(&body, `{"id":%q,"trigger":"submit-message","messages":[%s]}`, agent, user)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/chat", &body)
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("bench: post %d: %w", i, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode == http.StatusConflict {
			return fmt.Errorf("bench: post %d: %w: %s", i, errTurnActive, b)
		}
		return fmt.Errorf("bench: post %d: %d %s", i, resp.StatusCode, b)
	}
	last, done, err := readSSE(resp.Body)
	if done {
		return nil
	}
	return &cutStream{post: i, last: last, err: err}
}

// readSSE reads an SSE response of the gateway to its end: the last event
// id (cursor) it carried, "" for none, and whether it ended with [DONE].
func readSSE(body io.Reader) (last string, done bool, err error) {
	sc := bufio.NewScanner(body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		switch line := sc.Text(); {
		case line == "data: [DONE]":
			return last, true, nil
		case strings.HasPrefix(line, "id: "):
			last = strings.TrimPrefix(line, "id: ")
		}
	}
	return last, false, sc.Err()
}

// cutStream is a post answered 200 whose stream ended without [DONE]:
// the gateway ends it so when its follow of the chunks fails past its
// retries (a stream's leader electing), and the turn goes on; a client
// resumes from last (resumeTurn).
type cutStream struct {
	post int
	last string // the last event id read, "" for none
	err  error  // the read's, nil when the server ended the response
}

func (e *cutStream) Error() string {
	return fmt.Sprintf("bench: post %d: the stream ended without [DONE] after event id %q (%v)", e.post, e.last, e.err)
}

// resumeCuts bounds how often postTurnResuming resumes one turn.
const resumeCuts = 3

// postTurnResuming is postTurnTo that, as the gateway's documented
// client does (replay: "a transient failure ends the response without
// [DONE] and the client resumes with Last-Event-ID"), resumes a stream cut
// short from its last event id, up to resumeCuts times, and reports how
// many resumes the turn took. A turn whose stream is cut again past that
// is a failure (a *cutStream).
func postTurnResuming(ctx context.Context, hc *http.Client, base, agent string, i int) (resumed int, err error) {
	err = postTurnTo(ctx, hc, base, agent, i)
	var cut *cutStream
	for ; errors.As(err, &cut) && resumed < resumeCuts && ctx.Err() == nil; resumed++ {
		err = resumeTurn(ctx, hc, base, agent, cut)
	}
	return resumed, err
}

// resumeTurn reads the rest of the turn cut short: after its last event
// id (?after= replays what followed it and [DONE], the turn ended or not),
// or, when the cut came before any event, the agent's unfinished turn
// from its start (204: no turn unfinished, so this one ended). It returns
// nil at [DONE] or 204, a *cutStream when cut again.
func resumeTurn(ctx context.Context, hc *http.Client, base, agent string, cut *cutStream) error {
	u := base + "/v1/chat/" + url.PathEscape(agent) + "/stream"
	if cut.last != "" {
		u += "?after=" + url.QueryEscape(cut.last)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("bench: post %d: resume: %w", cut.post, err)
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusNoContent:
		return nil
	case http.StatusOK:
	default:
		b, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("bench: post %d: resume: %d %s", cut.post, resp.StatusCode, b)
	}
	last, done, err := readSSE(resp.Body)
	if done {
		return nil
	}
	if last == "" {
		last = cut.last
	}
	return &cutStream{post: cut.post, last: last, err: err}
}

// awaitNoTurn waits until chatPostAgent has no active turn: its resume
// answers 204.
func awaitNoTurn(ctx context.Context, hc *http.Client, base string) error {
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/chat/"+chatPostAgent+"/stream", nil)
		if err != nil {
			return fmt.Errorf("bench: %w", err)
		}
		resp, err := hc.Do(req)
		if err != nil {
			return fmt.Errorf("bench: resume: %w", err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusNoContent {
			return nil
		}
	}
	return errors.New("bench: the turn did not end within 30 s")
}
