package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/forever-agents/forever/agentd/chathost"
	"github.com/forever-agents/forever/agentd/demo"
	"github.com/forever-agents/forever/agentd/host"
	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/replay"
	"github.com/forever-agents/forever/verify"
)

// Timeouts of the load's requests and reads.
const (
	followAttempt  = 5 * time.Second  // one Follow before it is resumed
	followDeadline = 90 * time.Second // a turn must end within this
)

// load drives agents over NATS and records what was acknowledged.
type load struct {
	// requestTimeout bounds one command; a cluster's is longer, as a
	// command may wait for a partition's new owner.
	requestTimeout time.Duration
	// sends carries the agent of each chat command just sent, dropped
	// when nobody waits (nextSend): a stepdown or handoff aims at a turn
	// whose first writes are in flight.
	sends chan string
	// resends are the sends of resendInFlight, awaited before the checks.
	resends sync.WaitGroup

	mu struct {
		sync.Mutex
		acked     []verify.Ack
		sent      map[string][]sentChat // per chat agent, in order
		flights   map[string]*flight    // per chat agent: its command in flight
		ops       map[string]int
		anomalies []string
	}
}

// client is one load worker's connection to agentd, and its reader of
// chat streams over it.
type client struct {
	nc     *nats.Conn
	lg     *eventlog.Log
	stream *replay.Client
}

// sentChat is one chat command the load sent: its marker (unique in the
// run, in its text) and, once acknowledged, its first reply's request id
// and every reply's ids (acks). sends counts how often it was sent, by
// its client and by resendInFlight.
type sentChat struct {
	marker string
	mode   string
	// policy is the command's multitask policy ("" is reject, the
	// default); mayBeRolledBack is set once a later command of its round
	// was sent with "rollback", which may remove it from the conversation.
	policy          string
	mayBeRolledBack bool
	acked           bool
	request         string
	acks            []turnID
	sends           int
}

// turnID is what a chat command's reply names: its turn's request id and
// stream.
type turnID struct{ request, stream string }

// flight is a chat command with an identity from its first send until
// its turn's stream ended (or its client gave up): resendInFlight sends
// it again meanwhile.
type flight struct {
	agent string
	idx   int // in load.mu.sent[agent]
	key   string
	cmd   map[string]any
	via   *client // its client's connection
}

func newLoad(requestTimeout time.Duration) *load {
	l := &load{requestTimeout: requestTimeout, sends: make(chan string)}
	l.mu.ops = map[string]int{}
	l.mu.sent = map[string][]sentChat{}
	l.mu.flights = map[string]*flight{}
	return l
}

// recordAck records a reply of the command idx of agent, from its client
// or a resend: the first makes it acknowledged; each request id it names
// must then be in the log (verify's acknowledged writes).
func (l *load) recordAck(agent string, idx int, r chathost.Reply) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := &l.mu.sent[agent][idx]
	seen := false
	for _, a := range s.acks {
		seen = seen || a.request == r.RequestID
	}
	s.acks = append(s.acks, turnID{request: r.RequestID, stream: r.StreamID})
	if !s.acked {
		s.acked, s.request = true, r.RequestID
	}
	if !seen {
		l.mu.acked = append(l.mu.acked, verify.Ack{Agent: agent, ID: r.RequestID})
	}
}

// sent notes one send of the command idx of agent, and offers agent to
// a nextSend waiting for it.
func (l *load) sent(agent string, idx int) {
	l.mu.Lock()
	l.mu.sent[agent][idx].sends++
	l.mu.Unlock()
	select {
	case l.sends <- agent:
	default:
	}
}

// nextSend waits up to d for the next chat command's send and returns its
// agent, "" when none came.
func (l *load) nextSend(ctx context.Context, d time.Duration) string {
	select {
	case agent := <-l.sends:
		return agent
	case <-time.After(d):
	case <-ctx.Done():
	}
	return ""
}

func (l *load) count(op string) {
	l.mu.Lock()
	l.mu.ops[op]++
	l.mu.Unlock()
}

func (l *load) ack(agent, id string) {
	l.mu.Lock()
	l.mu.acked = append(l.mu.acked, verify.Ack{Agent: agent, ID: id})
	l.mu.Unlock()
}

func (l *load) anomaly(format string, args ...any) {
	l.mu.Lock()
	l.mu.anomalies = append(l.mu.anomalies, fmt.Sprintf(format, args...))
	l.mu.Unlock()
}

// request sends one command; busy reports a 409 (a turn is active). A
// non-empty key is sent as the Idempotency-Key header.
func (l *load) request(ctx context.Context, c *client, agent, verb, key string, body, out any) (busy bool, err error) {
	code, err := send(ctx, c.nc, l.requestTimeout, agent, verb, key, body, out)
	return code == "409", err
}

// send sends one command over nc and waits up to timeout for its reply.
// code is the error code agentd answered with ("" for a reply, or no
// reply). A non-empty key is sent as the Idempotency-Key header.
func send(ctx context.Context, nc *nats.Conn, timeout time.Duration, agent, verb, key string, body, out any) (code string, err error) {
	data, _ := json.Marshal(body)
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	m := nats.NewMsg("forever.cmd." + agent + "." + verb)
	m.Data = data
	if key != "" {
		m.Header.Set(host.HeaderIdempotencyKey, key)
	}
	msg, err := nc.RequestMsgWithContext(rctx, m)
	if err != nil {
		return "", err
	}
	if code := msg.Header.Get("Nats-Service-Error-Code"); code != "" {
		return code, fmt.Errorf("%s %s: %s %s", agent, verb, code, msg.Header.Get("Nats-Service-Error"))
	}
	return "", json.Unmarshal(msg.Data, out)
}

// chatAttempts bounds the sends of one chat command whose reply was lost
// or refused as busy.
const chatAttempts = 30

// The identities a chat command is sent with, one picked at random for
// each: a command with one is sent again with it when its reply is lost
// or it is refused as busy, and must run once however often it is sent;
// one without (modeNone) is sent once, and gets the id the node that
// receives it mints, which must make it run once however often routing
// retries it between nodes.
const (
	modeMessage = "message id"      // message.id in the payload
	modeRequest = "request id"      // requestId in the payload
	modeKey     = "idempotency key" // the Idempotency-Key header
	modeNone    = "no identity"
)

var modes = []string{modeMessage, modeRequest, modeKey, modeNone}

// chat sends turns to agent one round after the other until ctx ends,
// following each round's turns to their ends. A round is one command, or,
// one time in three, a double text: a first command and one or two more
// sent at once after it, each with a multitask policy of policies (the
// first sometimes "debounce"). Each command's text carries a marker unique
// in the run, so the conversation shows how often it was stored
// (checkConversations); the command's identity is one of modes. verify
// then finds a message answered by two turns (or none), and a request id
// started twice; checkPolicies that each message is answered by the turn
// its reply named.
func (l *load) chat(ctx context.Context, c *client, agent string, rng *rand.Rand) {
	for n := 0; ctx.Err() == nil; {
		cmds := 1
		if rng.IntN(3) == 0 {
			cmds += 1 + rng.IntN(2)
		}
		var replies []chathost.Reply
		var round []int // the round's commands, in l.mu.sent[agent]
		for k := 0; k < cmds && ctx.Err() == nil; k, n = k+1, n+1 {
			policy := ""
			switch {
			case k > 0:
				policy = policies[rng.IntN(len(policies))]
			case cmds > 1 && rng.IntN(4) == 0:
				policy = "debounce"
			}
			marker := fmt.Sprintf("[%s #%d]", agent, n)
			text := "Tell me about chaos " + marker + "."
			if n%2 == 1 {
				text = "Chaos asks the time " + marker + ".\n/tool clock {}"
			}
			mode := modes[rng.IntN(len(modes))]
			id := fmt.Sprintf("%s-m%d-%d", agent, n, rng.Uint32())
			var cmd map[string]any
			key := ""
			switch mode {
			case modeMessage:
				cmd = map[string]any{"message": map[string]any{
					"id": id, "role": "user", "parts": []map[string]string{{"type": "text", "text": text}},
				}}
			case modeRequest:
				cmd = map[string]any{"text": text, "requestId": id}
			case modeKey:
				cmd, key = map[string]any{"text": text}, id
			default:
				cmd = map[string]any{"text": text}
			}
			if policy != "" {
				cmd["multitask"] = policy
				if policy == "debounce" && rng.IntN(2) == 0 {
					cmd["debounceMs"] = 50 + rng.IntN(500)
				}
			}
			l.mu.Lock()
			if policy == "rollback" {
				for _, i := range round {
					l.mu.sent[agent][i].mayBeRolledBack = true
				}
			}
			l.mu.sent[agent] = append(l.mu.sent[agent], sentChat{marker: marker, mode: mode, policy: policy})
			idx := len(l.mu.sent[agent]) - 1
			round = append(round, idx)
			if mode != modeNone {
				// Sent again by resendInFlight in a stepdown or a handoff
				// until its turn's stream ended.
				l.mu.flights[agent] = &flight{agent: agent, idx: idx, key: key, cmd: cmd, via: c}
			}
			l.mu.Unlock()
			if reply, ok := l.sendChat(ctx, c, agent, idx, key, mode, cmd); ok {
				replies = append(replies, reply)
			}
			if k == 0 && cmds > 1 {
				sleep(ctx, time.Duration(rng.IntN(100))*time.Millisecond) // the double text's gap
			}
		}
		followed := map[string]bool{}
		for _, reply := range replies {
			if !followed[reply.StreamID] {
				followed[reply.StreamID] = true
				l.followReply(ctx, c, agent, reply, rng)
			}
		}
		l.mu.Lock()
		delete(l.mu.flights, agent)
		l.mu.Unlock()
	}
}

// policies are the multitask policies of a round's later commands.
var policies = []string{"enqueue", "interrupt", "rollback", "steer", "merge", "debounce"}

// sendChat sends the command idx of agent until it is acknowledged (or
// given up) and records its reply.
func (l *load) sendChat(ctx context.Context, c *client, agent string, idx int, key, mode string, cmd map[string]any) (chathost.Reply, bool) {
	var reply chathost.Reply
	acked := false
	for attempt := 0; attempt < chatAttempts && ctx.Err() == nil; attempt++ {
		if attempt > 0 {
			l.count("chat resent")
		}
		l.sent(agent, idx)
		code, err := send(ctx, c.nc, l.requestTimeout, agent, "chat", key, cmd, &reply)
		if err == nil {
			acked = true
			break
		}
		if code == "409" { // refused: nothing was stored
			l.count("chat busy")
			sleep(ctx, 200*time.Millisecond)
			continue
		}
		if code == "504" {
			// Its turn is being confirmed (a write whose fate is
			// unknown): sent again, it gets the turn's ids.
			l.count("chat unconfirmed")
		}
		l.count("chat lost")
		if mode == modeNone {
			break // it may have run: sent again, it would be a second command
		}
		sleep(ctx, 100*time.Millisecond)
	}
	if !acked {
		return reply, false
	}
	l.recordAck(agent, idx, reply)
	l.count("chats")
	if p, _ := cmd["multitask"].(string); p != "" {
		l.count("chats " + p)
	}
	return reply, true
}

// followReply follows an acknowledged command's turn's stream to its end,
// then replays it.
func (l *load) followReply(ctx context.Context, c *client, agent string, reply chathost.Reply, rng *rand.Rand) {
	items, ended, lastErr := l.follow(ctx, c, agent, reply.StreamID, reply.Cursor)
	if !ended {
		if ctx.Err() == nil {
			// An acknowledged turn's stream must end (finish, error
			// or abort): its clients would wait forever.
			l.count("follows unfinished")
			l.anomaly("%s/%s: the stream of acknowledged request %s did not end within %s for a follower from the reply's cursor %s: %s",
				agent, reply.StreamID, reply.RequestID, followDeadline, reply.Cursor, l.streamDiag(ctx, c, agent, reply.StreamID, len(items), lastErr))
		}
		return
	}
	l.count("follows")
	l.replayFrom(ctx, c, agent, reply.StreamID, items, rng)
}

// follow follows a turn's stream from after to its terminal chunk, resuming
// from the last cursor whenever the follow fails (agentd died under it),
// and checks that it sees each chunk once, in order. It returns the chunks
// seen, whether the terminal one was among them, and the last error.
func (l *load) follow(ctx context.Context, c *client, agent, stream string, after replay.Cursor) ([]replay.Item, bool, error) {
	var items []replay.Item
	var lastErr error
	deadline := time.Now().Add(followDeadline)
	for ctx.Err() == nil && time.Now().Before(deadline) {
		fctx, cancel := context.WithTimeout(ctx, followAttempt)
		for it, err := range c.stream.FollowTurn(fctx, agent, stream, after) {
			if err != nil {
				lastErr = err
				break
			}
			if it.Cursor.Compare(after) <= 0 {
				l.anomaly("%s/%s: reader got cursor %v after %v", agent, stream, it.Cursor, after)
			}
			items = append(items, it)
			after = it.Cursor
			if it.Chunk.Terminal() {
				cancel()
				return items, true, nil
			}
		}
		cancel()
		sleep(ctx, 50*time.Millisecond)
	}
	return items, false, lastErr
}

// streamDiag says what a follower that did not see a stream end saw, and
// what the stream holds: its first and last stored events.
func (l *load) streamDiag(ctx context.Context, c *client, agent, stream string, seen int, lastErr error) string {
	f := eventlog.Filter{Agent: agent, Stream: stream}
	describe := func(e eventlog.Event, ok bool, err error) string {
		switch {
		case err != nil:
			return "unread: " + err.Error()
		case !ok:
			return "none"
		}
		return fmt.Sprintf("seq %d %s by %s", e.Seq, e.ID, e.Writer.Node)
	}
	first, ok, err := c.lg.Next(ctx, f, 0)
	firstText := describe(first, ok, err)
	last, ok, err := c.lg.Last(ctx, f)
	lastText := describe(last, ok, err)
	if ok && err == nil {
		lastText += " " + string(last.Data)
	}
	return fmt.Sprintf("it saw %d chunks (last error: %v); the stream's first stored chunk is %s, its last %s", seen, lastErr, firstText, lastText)
}

// replayFrom replays an ended stream from a random cursor of it and checks
// that it yields exactly the chunks that followed it.
func (l *load) replayFrom(ctx context.Context, c *client, agent, stream string, items []replay.Item, rng *rand.Rand) {
	i := rng.IntN(len(items))
	want := items[i+1:]
	for range 5 {
		rctx, cancel := context.WithTimeout(ctx, followAttempt)
		var got []replay.Item
		var err error
		for it, ferr := range c.stream.Follow(rctx, agent, stream, items[i].Cursor) {
			if err = ferr; err != nil {
				break
			}
			got = append(got, it)
		}
		cancel()
		if err != nil {
			sleep(ctx, 100*time.Millisecond)
			continue
		}
		l.count("replays")
		if len(got) != len(want) {
			l.anomaly("%s/%s: replay after %v got %d chunks, want %d", agent, stream, items[i].Cursor, len(got), len(want))
			return
		}
		for k := range got {
			a, _ := json.Marshal(got[k].Chunk)
			b, _ := json.Marshal(want[k].Chunk)
			if got[k].Cursor != want[k].Cursor || string(a) != string(b) {
				l.anomaly("%s/%s: replay after %v differs at %d: %s at %v, want %s at %v", agent, stream, items[i].Cursor, k, a, got[k].Cursor, b, want[k].Cursor)
				return
			}
		}
		return
	}
	if ctx.Err() == nil {
		l.count("replays failed")
	}
}

// steps starts steps fibers on agent until ctx ends.
func (l *load) steps(ctx context.Context, c *client, agent string, rng *rand.Rand) {
	for ctx.Err() == nil {
		body := demo.StepsStart{Steps: 2 + rng.IntN(5), DelayMS: 40 + rng.IntN(120)}
		var reply struct{ Fiber string }
		if _, err := l.request(ctx, c, agent, "start", "", body, &reply); err != nil || reply.Fiber == "" {
			l.count("starts lost")
		} else {
			l.ack(agent, reply.Fiber)
			l.count("steps starts")
		}
		sleep(ctx, time.Duration(200+rng.IntN(500))*time.Millisecond)
	}
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-time.After(d):
	case <-ctx.Done():
	}
}
