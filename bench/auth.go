package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"

	fauth "github.com/forever-agents/forever/auth"
	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/replay"
	"github.com/nats-io/nats.go"
)

// Auth scenario parameters, at -n 1.
const (
	authConnects = 100  // connection set-ups per series
	authCommands = 2000 // status requests per series
	authParallel = 8    // concurrent requesters for throughput
	authReplays  = 50   // replays of a finished stream per series
	authTurns    = 20   // chat turns timed to their last chunk per series
	authRounds   = 4
)

// authCost measures what auth costs: one agentd with --auth, its client a
// tenant's credential (the account's permissions checked by the server on
// every message), beside one without auth, same binary and flags otherwise,
// in alternating rounds. Figures: connection set-up (with the creds file's
// JWT signature exchange), a status command's latency, commands per second
// from authParallel clients, a chat turn from its request to its last chunk
// delivered to a follower (chunk delivery), and the replay of a finished
// stream from cursor 0 through an ordered consumer.
func authCost(ctx context.Context, env *Env) (res Result, err error) {
	bin, err := env.AgentdBinary(ctx)
	if err != nil {
		return Result{}, err
	}
	on, err := openAuthTarget(ctx, env, bin, true)
	if err != nil {
		return Result{}, err
	}
	defer func() { err = errors.Join(err, on.close()) }()
	off, err := openAuthTarget(ctx, env, bin, false)
	if err != nil {
		return Result{}, err
	}
	defer func() { err = errors.Join(err, off.close()) }()

	connects, commands := env.Count(authConnects, authConnects), env.Count(authCommands, authCommands)
	replays, turns := env.Count(authReplays, authReplays), env.Count(authTurns, authTurns)
	round := func(t *authTarget) func(int) error {
		return func(r int) error {
			for range split(connects, authRounds, r) {
				if err := t.connectOnce(); err != nil {
					return err
				}
			}
			for range split(commands, authRounds, r) {
				if err := t.status(ctx); err != nil {
					return err
				}
			}
			if err := t.throughput(ctx, split(commands, authRounds, r)); err != nil {
				return err
			}
			for range split(turns, authRounds, r) {
				if err := t.turn(ctx); err != nil {
					return err
				}
			}
			for range split(replays, authRounds, r) {
				if err := t.replayOnce(ctx); err != nil {
					return err
				}
			}
			return nil
		}
	}
	if err := alternate(authRounds, round(on), round(off)); err != nil {
		return Result{}, err
	}
	const base = "same, auth off"
	p50 := func(d []time.Duration) float64 { return micros(percentile(d, 50)) }
	return Result{Rows: []Row{
		{Figure: "connect p50 us (tenant creds)", Value: p50(on.connects), Baseline: base, BaselineValue: p50(off.connects), LowerIsBetter: true},
		{Figure: "status command p50 us", Value: p50(on.commands), Baseline: base, BaselineValue: p50(off.commands), LowerIsBetter: true},
		{Figure: fmt.Sprintf("status commands/s, %d clients", authParallel), Value: on.rate(), Baseline: base, BaselineValue: off.rate()},
		{Figure: "chat turn to last chunk p50 us", Value: p50(on.turns), Baseline: base, BaselineValue: p50(off.turns), LowerIsBetter: true},
		{Figure: "replay of a finished stream p50 us", Value: p50(on.replays), Baseline: base, BaselineValue: p50(off.replays), LowerIsBetter: true},
	}}, nil
}

// authTarget is one agentd and what was measured against it.
type authTarget struct {
	proc *agentdProc
	url  string
	opts []nats.Option // the client's credential, if any
	nc   *nats.Conn
	lg   *eventlog.Log
	// apiPrefix is the JetStream API prefix of the client: a tenant's.
	apiPrefix string
	agent     string
	last      string // a finished stream of agent

	connects, commands, turns, replays []time.Duration
	done                               int
	busy                               time.Duration
}

func openAuthTarget(ctx context.Context, env *Env, bin string, auth bool) (*authTarget, error) {
	dir, err := env.TempDir()
	if err != nil {
		return nil, err
	}
	args := []string{"--local-rate", "-1", "--log-level", "warn"}
	if auth {
		// Under --auth /metrics has a listener of its own, by default on
		// a fixed loopback port a local agentd may hold: take a free one.
		args = append(args, "--auth", "--metrics-listen", "127.0.0.1:0")
	}
	p, err := newAgentdProc(bin, dir, SyncAlways, args...)
	if err != nil {
		return nil, err
	}
	if _, err := p.start(ctx); err != nil {
		return nil, err
	}
	t := &authTarget{proc: p, url: "nats://" + p.natsAddr, agent: "bench"}
	if auth {
		// The scenario measures what auth costs, not the tenant's quota:
		// its default rate (100/s) would refuse a fast run with 429.
		out, err := exec.CommandContext(ctx, bin, "tenant", "create", "bench", "--rate", "unlimited", "--nats-url", t.url,
			"--creds", filepath.Join(p.data, "admin.creds"), "--out", dir).CombinedOutput()
		if err != nil {
			p.kill()
			return nil, fmt.Errorf("bench: tenant create: %v\n%s", err, out)
		}
		t.opts = []nats.Option{nats.UserCredentials(filepath.Join(dir, "bench.creds"))}
		t.apiPrefix = fauth.ClientAPIPrefix // a tenant's JetStream API goes through agentd
	}
	if t.nc, err = nats.Connect(t.url, t.opts...); err != nil {
		p.kill()
		return nil, fmt.Errorf("bench: connect: %w", err)
	}
	t.lg, err = eventlog.Open(ctx, eventlog.Config{Conn: t.nc, Bind: true, ChunksOnly: true, APIPrefix: t.apiPrefix,
		Logger: slog.New(slog.DiscardHandler)})
	if err == nil {
		err = t.turn(ctx) // the agent exists, and a finished stream to replay
	}
	if err != nil {
		t.close()
		return nil, err
	}
	t.turns = nil
	return t, nil
}

func (t *authTarget) connectOnce() error {
	began := time.Now()
	nc, err := nats.Connect(t.url, t.opts...)
	if err != nil {
		return fmt.Errorf("bench: connect: %w", err)
	}
	t.connects = append(t.connects, time.Since(began))
	nc.Close()
	return nil
}

func (t *authTarget) request(ctx context.Context, verb string, body any) ([]byte, error) {
	data, _ := json.Marshal(body)
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	m, err := t.nc.RequestWithContext(ctx, "forever.cmd."+t.agent+"."+verb, data)
	if err != nil {
		return nil, fmt.Errorf("bench: %s: %w", verb, err)
	}
	if code := m.Header.Get("Nats-Service-Error-Code"); code != "" {
		return nil, fmt.Errorf("bench: %s: %s %s", verb, code, m.Header.Get("Nats-Service-Error"))
	}
	return m.Data, nil
}

func (t *authTarget) status(ctx context.Context) error {
	began := time.Now()
	if _, err := t.request(ctx, "status", nil); err != nil {
		return err
	}
	t.commands = append(t.commands, time.Since(began))
	return nil
}

// throughput sends n status commands from authParallel clients at once.
func (t *authTarget) throughput(ctx context.Context, n int) error {
	var wg sync.WaitGroup
	errs := make(chan error, authParallel)
	began := time.Now()
	for i := range authParallel {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range split(n, authParallel, i) {
				if _, err := t.request(ctx, "status", nil); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	t.busy += time.Since(began)
	t.done += n
	select {
	case err := <-errs:
		return err
	default:
		return nil
	}
}

func (t *authTarget) rate() float64 { return float64(t.done) / t.busy.Seconds() }

// turn sends a chat and follows its stream to the last chunk.
func (t *authTarget) turn(ctx context.Context) error {
	began := time.Now()
	data, err := t.request(ctx, "chat", map[string]string{"text": "Tell me a short story."})
	if err != nil {
		return err
	}
	var r struct {
		StreamID string `json:"streamId"`
	}
	if err := json.Unmarshal(data, &r); err != nil {
		return err
	}
	if err := t.follow(ctx, r.StreamID); err != nil {
		return err
	}
	t.turns = append(t.turns, time.Since(began))
	t.last = r.StreamID
	return nil
}

func (t *authTarget) follow(ctx context.Context, stream string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	n := 0
	// Right after the chat reply the stream may have no chunk yet.
	for n == 0 {
		for _, err := range replay.NewClient(t.lg).Follow(ctx, t.agent, stream, replay.Cursor{}) {
			if errors.Is(err, replay.ErrUnknownStream) && n == 0 && ctx.Err() == nil {
				time.Sleep(time.Millisecond)
				break
			}
			if err != nil {
				return fmt.Errorf("bench: follow: %w", err)
			}
			n++
		}
	}
	if n == 0 {
		return errors.New("bench: follow: no chunks")
	}
	return nil
}

func (t *authTarget) replayOnce(ctx context.Context) error {
	began := time.Now()
	if err := t.follow(ctx, t.last); err != nil {
		return err
	}
	t.replays = append(t.replays, time.Since(began))
	return nil
}

func (t *authTarget) close() error {
	if t.nc != nil {
		t.nc.Close()
	}
	err := t.proc.stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
	return err
}
