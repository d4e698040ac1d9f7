package compaction

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/internal/promreg"
	"github.com/prometheus/client_golang/prometheus"
)

// Defaults of Config.
const (
	DefaultEvents     = 10000
	DefaultBytes      = 8 << 20
	DefaultIdleEvents = CandidateEvents
	DefaultEvery      = 30 * time.Second
)

// conflictTries bounds the attempts of one compaction that conflicts with
// the agent's own appends (a busy agent) before the next sweep.
const conflictTries = 3

// Config configures a Compactor.
type Config struct {
	// Log is the agents' log; the stats view must be registered on its
	// events Follower (AddView). Required.
	Log *eventlog.Log
	// Owns reports whether this node owns agent now. Nil: every agent.
	Owns func(agent string) bool
	// Events and Bytes since the last snapshot make an agent due. Defaults
	// DefaultEvents and DefaultBytes; negative Events turns compaction
	// off.
	Events, Bytes int64
	// IdleEvents since the last snapshot make an agent that goes idle due.
	// Default DefaultIdleEvents.
	IdleEvents int64
	// Every is the sweep interval. Default DefaultEvery.
	Every      time.Duration
	Logger     *slog.Logger
	Registerer prometheus.Registerer
	// Before, if set, runs before each compaction of an agent, which an
	// error puts off to a later sweep: agentd's host detaches the agent's
	// forks there, since the agent's history they read leaves the log.
	Before func(ctx context.Context, agent string) error
}

// Compactor runs compactions by the policy of the package doc.
type Compactor struct {
	cfg    Config
	view   *eventlog.View
	logger *slog.Logger
	runs   *prometheus.CounterVec

	mu      sync.Mutex
	running map[string]bool // agents being compacted
	refused bool            // the log refuses compaction (ErrInvalid): logged once
}

// New returns a Compactor. Errors: the stats view cannot be read, or the
// metrics cannot be registered.
func New(cfg Config) (*Compactor, error) {
	if cfg.Log == nil {
		return nil, errors.New("compaction: Config.Log is required")
	}
	if cfg.Events == 0 {
		cfg.Events = DefaultEvents
	}
	if cfg.Bytes == 0 {
		cfg.Bytes = DefaultBytes
	}
	if cfg.IdleEvents == 0 {
		cfg.IdleEvents = DefaultIdleEvents
	}
	if cfg.Every == 0 {
		cfg.Every = DefaultEvery
	}
	if cfg.Owns == nil {
		cfg.Owns = func(string) bool { return true }
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	v, err := cfg.Log.View(ViewName)
	if err != nil {
		return nil, err
	}
	c := &Compactor{cfg: cfg, view: v, logger: cfg.Logger.With("subsystem", "compaction"), running: map[string]bool{}}
	c.runs = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "forever_compaction_runs_total",
		Help: "Compactions the policy started, by trigger (size, idle) and result (ok, nothing, conflict, error).",
	}, []string{"trigger", "result"})
	if cfg.Registerer != nil {
		if c.runs, err = promreg.Register(cfg.Registerer, c.runs); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// Enabled reports whether the policy compacts at all.
func (c *Compactor) Enabled() bool { return c.cfg.Events >= 0 }

// Stats returns what agent stored since its last snapshot, as the stats
// view has applied it.
func (c *Compactor) Stats(agent string) (Stats, error) { return readStats(c.view, agent) }

// Run sweeps the candidates every Config.Every until ctx ends.
func (c *Compactor) Run(ctx context.Context) error {
	if !c.Enabled() {
		<-ctx.Done()
		return nil
	}
	t := time.NewTicker(c.cfg.Every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			c.Sweep(ctx)
		}
	}
}

// Sweep compacts the owned agents past Config.Events or Config.Bytes. It
// reads only the candidates of the stats view.
func (c *Compactor) Sweep(ctx context.Context) {
	var due []string
	for kv, err := range c.view.Scan(candidatePrefix) {
		if err != nil {
			c.logger.Warn("compaction sweep: read the stats view", "err", err)
			return
		}
		agent := string(kv.Key[len(candidatePrefix):])
		if !c.cfg.Owns(agent) {
			continue
		}
		st, err := c.Stats(agent)
		if err != nil {
			c.logger.Warn("compaction sweep: read stats", "agent", agent, "err", err)
			continue
		}
		if st.Events >= c.cfg.Events || st.Bytes >= c.cfg.Bytes {
			due = append(due, agent)
		}
	}
	for _, agent := range due {
		if ctx.Err() != nil {
			return
		}
		c.compact(ctx, agent, "size")
	}
}

// Idle compacts agent, going idle, if it stored at least
// Config.IdleEvents events since its last snapshot and this node owns it.
func (c *Compactor) Idle(ctx context.Context, agent string) {
	if !c.Enabled() || !c.cfg.Owns(agent) {
		return
	}
	st, err := c.Stats(agent)
	if err != nil || st.Events < c.cfg.IdleEvents {
		return
	}
	c.compact(ctx, agent, "idle")
}

// compact runs one compaction of agent, unless one runs already.
func (c *Compactor) compact(ctx context.Context, agent, trigger string) {
	c.mu.Lock()
	if c.running[agent] || c.refused {
		c.mu.Unlock()
		return
	}
	c.running[agent] = true
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.running, agent)
		c.mu.Unlock()
	}()
	var (
		res eventlog.Compacted
		err error
	)
	if c.cfg.Before != nil {
		if err := c.cfg.Before(ctx, agent); err != nil {
			c.logger.Warn("compaction put off: what must run before it failed", "agent", agent, "trigger", trigger, "err", fmt.Sprint(err))
			c.runs.WithLabelValues(trigger, "error").Inc()
			return
		}
	}
	for range conflictTries {
		if res, err = c.cfg.Log.Compact(ctx, agent); !errors.Is(err, eventlog.ErrConflict) {
			break
		}
	}
	result := "ok"
	switch {
	case err == nil:
		c.logger.Info("agent compacted", "agent", agent, "trigger", trigger, "snapshot", res.Seq,
			"upto", res.Upto, "parts", res.Parts, "rows", res.Rows, "bytes", res.Bytes)
	case errors.Is(err, eventlog.ErrNothingToCompact):
		result = "nothing"
	case errors.Is(err, eventlog.ErrConflict):
		result = "conflict"
		c.logger.Debug("compaction conflicted with the agent's own appends; trying at the next sweep", "agent", agent)
	case errors.Is(err, eventlog.ErrInvalid):
		result = "error"
		c.mu.Lock()
		c.refused = true
		c.mu.Unlock()
		c.logger.Error("compaction is off: the log refuses it", "err", err)
	default:
		result = "error"
		c.logger.Warn("compaction failed", "agent", agent, "trigger", trigger, "err", fmt.Sprint(err))
	}
	c.runs.WithLabelValues(trigger, result).Inc()
}
