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
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if sc.Text() == "data: [DONE]" {
			return nil
		}
	}
	return fmt.Errorf("bench: post %d: the stream ended without [DONE] (%v)", i, sc.Err())
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
