package verify

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/forever-agents/forever/blob"
	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/internal/backoff"
)

// Options tune Check. The zero value checks the log's invariants only.
type Options struct {
	// Acked lists what the caller saw acknowledged; each must be in the log.
	Acked []Ack
	// PageSize is how many events one read returns. Default 4096.
	PageSize int
	// Blobs, when set, is the blob store the events' references are
	// checked against: each payload stored by reference must be there and
	// match its digest (KindBlobMissing, KindBlobMismatch).
	Blobs Blobs

	// Tests' hooks (export_test.go): afterLast runs once a read of a
	// stream knows its last sequence, betweenReads before a read again.
	afterLast    func(eventlog.Filter)
	betweenReads func()
	pause        time.Duration // the first pause between reads (readAgainPause)
}

// Ack is one acknowledged write: ID is an event id of Agent, the request id
// of one of its turns (turn.started) or the id of one of its fibers
// (fiber.started). A chat reply's requestId and a steps start's fiber id
// are such ids.
type Ack struct {
	Agent, ID string
}

// Check reads lg's events and chunks streams up to their last sequence when
// it began and checks them against the invariants listed in the package
// documentation. A broken invariant is a Violation in the report, not an
// error; the error is for a log that could not be read (the report then
// holds what was found so far). An event that does not decode is a
// KindCorrupt violation and the read goes on past it.
//
// A live node changes the log while Check reads it. Appends are not a
// problem: each stream is read up to its last sequence when its read
// began. Removals are: a compaction that appends an agent's snapshot after
// that sequence and purges the agent's events before the read reaches
// them leaves the read with neither the history nor the snapshot, and
// every acknowledged write of the agent would look lost (a chaos run's
// verify, on a node compacting its idle agents, saw 152 such). So Check
// compares the log's removals (eventlog.Log.Removals) before and after
// its read of each kind of stream (the events, then the chunks), and
// reads the whole log again, from a new checker, while they differ: at
// most maxReads times, pausing between reads, then it fails with
// ErrUnsettled. Report.Reads says how many reads it took.
func Check(ctx context.Context, lg *eventlog.Log, opts Options) (Report, error) {
	if opts.PageSize <= 0 {
		opts.PageSize = 4096
	}
	pause := readAgainPause
	if opts.pause > 0 {
		pause = opts.pause
	}
	var c *checker
	reads := 0
	err := backoff.Retry(ctx, pause, 2*time.Second, func(err error) bool {
		again := errors.Is(err, ErrUnsettled) && reads < maxReads && ctx.Err() == nil
		if again && opts.betweenReads != nil {
			opts.betweenReads()
		}
		return again
	}, func() error {
		reads++
		c = newChecker(opts.Acked)
		return c.read(ctx, lg, opts)
	})
	// The read ran at least once: c is the last one's.
	if err == nil {
		c.finish()
		if opts.Blobs != nil {
			err = c.checkBlobs(ctx, opts.Blobs)
		}
	}
	return c.report(reads), err
}

// ErrUnsettled is Check's error when something was removed from the log
// during each of its maxReads reads: a live node compacting or deleting
// agents, or retention purging chunks, all the time. Run it again when
// the node is quieter, or on a stopped node's data (agentd verify --data).
var ErrUnsettled = errors.New("verify: the log lost events to purges during every read")

// maxReads bounds Check's reads of a log that changes under it, and
// readAgainPause is its first pause between them (doubled up to 2 s).
const (
	maxReads       = 10
	readAgainPause = 100 * time.Millisecond
)

// read reads the log into c: each agent's latest snapshot first (it
// supersedes the agent's events before it, which a crash can leave
// stored: see KindSuperseded), then the events, then the chunks. It
// returns ErrUnsettled when the events streams' removals changed during
// the first two, or the chunks streams' during the third: only a removal
// from the streams being read can hide what the read has not reached.
func (c *checker) read(ctx context.Context, lg *eventlog.Log, opts Options) error {
	return settled(ctx, lg, false, func() error {
		err := readAll(ctx, lg, eventlog.Filter{}, opts.PageSize, c.findSnapshot, func(*eventlog.CorruptError) {}, opts.afterLast)
		if err == nil {
			err = readAll(ctx, lg, eventlog.Filter{}, opts.PageSize, c.event, c.corrupt, opts.afterLast)
		}
		if err == nil {
			err = settled(ctx, lg, true, func() error {
				return readAll(ctx, lg, eventlog.Filter{Chunks: true}, opts.PageSize, c.chunk, c.corrupt, opts.afterLast)
			})
		}
		return err
	})
}

// settled runs read, and returns ErrUnsettled when the removals of the
// streams of one kind (chunks, or events) changed while it ran.
func settled(ctx context.Context, lg *eventlog.Log, chunks bool, read func() error) error {
	before, err := removals(ctx, lg, chunks)
	if err != nil {
		return err
	}
	if err := read(); err != nil {
		return err
	}
	after, err := removals(ctx, lg, chunks)
	if err == nil && after != before {
		kind := "events"
		if chunks {
			kind = "chunks"
		}
		err = fmt.Errorf("%w: %d %s removed during the read", ErrUnsettled, after-before, kind)
	}
	return err
}

// removals is lg's removals of one kind, asked again while JetStream
// cannot answer.
func removals(ctx context.Context, lg *eventlog.Log, chunks bool) (n uint64, err error) {
	err = untilAnswered(ctx, func() (err error) {
		n, err = lg.Removals(ctx, chunks)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("verify: the log's removals: %w", err)
	}
	return n, nil
}

// readAll calls visit for every event matching f stored up to the last
// sequence when it began, and corrupt for each that does not decode. A
// read JetStream could not answer now (eventlog.Unavailable: a stream
// electing its leader, a server catching up) is tried again until ctx
// ends: verify is run on a live cluster, where a node's restart moves
// stream leaders.
func readAll(ctx context.Context, lg *eventlog.Log, f eventlog.Filter, page int, visit func(eventlog.Event), corrupt func(*eventlog.CorruptError), afterLast func(eventlog.Filter)) error {
	var last eventlog.Seq
	err := untilAnswered(ctx, func() (err error) {
		last, err = lg.LastSeq(ctx, f)
		return err
	})
	if err != nil {
		return fmt.Errorf("verify: last sequence: %w", err)
	}
	if afterLast != nil {
		afterLast(f)
	}
	var after eventlog.Seq
	for after < last {
		var evs []eventlog.Event
		err := untilAnswered(ctx, func() (err error) {
			evs, err = lg.Read(ctx, f, after, page)
			return err
		})
		for _, e := range evs {
			if e.Seq > last {
				return nil
			}
			visit(e)
			after = e.Seq
		}
		var ce *eventlog.CorruptError
		switch {
		case errors.As(err, &ce) && ce.Seq > after:
			corrupt(ce)
			after = ce.Seq
		case err != nil:
			return fmt.Errorf("verify: read after %d: %w", after, err)
		case len(evs) == 0:
			return nil
		}
	}
	return nil
}

// untilAnswered calls read until it returns an error other than
// eventlog.Unavailable, or ctx ends (then the last error), pausing 100 ms
// doubling up to 2 s.
func untilAnswered(ctx context.Context, read func() error) error {
	return backoff.Retry(ctx, 100*time.Millisecond, 2*time.Second, func(err error) bool {
		return eventlog.Unavailable(err) && ctx.Err() == nil
	}, read)
}

// checker holds the state of one Check: one goroutine, no locking.
type checker struct {
	agents  map[string]*agentState
	streams map[streamKey]*streamState
	acked   map[Ack]bool // false until found
	out     []Violation
	notes   []Violation
	events  int
	chunks  int
	// latest is where each compacted agent's latest snapshot starts (its
	// first part); superseded counts the agent's events stored before it.
	latest     map[string]eventlog.Seq
	superseded map[string]int
	// childTurns are the sub-agent turns started by each parent's call.
	childTurns map[callKey][]childTurn
	// tombstone is where each deleted agent's latest tombstone is, when
	// it is also its latest (see findSnapshot).
	tombstone map[string]eventlog.Seq
	// refs are the payload references the events hold (blobs.go), and
	// blobs how many were checked.
	refs  map[blob.Ref]refSite
	blobs int
}

func newChecker(acked []Ack) *checker {
	c := &checker{
		agents:  map[string]*agentState{},
		streams: map[streamKey]*streamState{},
		acked:   map[Ack]bool{},

		latest:     map[string]eventlog.Seq{},
		superseded: map[string]int{},
		childTurns: map[callKey][]childTurn{},
		tombstone:  map[string]eventlog.Seq{},
		refs:       map[blob.Ref]refSite{},
	}
	for _, a := range acked {
		c.acked[a] = false
	}
	return c
}

func (c *checker) violate(v Violation) { c.out = append(c.out, v) }

func (c *checker) corrupt(ce *eventlog.CorruptError) {
	agent := ""
	// <prefix>.evt.<agent> or <prefix>.chunk.<agent>.<stream>; sharded,
	// with the partition before the agent.
	if parts := strings.Split(ce.Subject, "."); len(parts) >= 3 {
		agent = parts[len(parts)-1]
		if parts[1] == "chunk" {
			agent = parts[len(parts)-2]
		}
	}
	c.violate(Violation{Kind: KindCorrupt, Agent: agent, Seq: ce.Seq,
		Text: fmt.Sprintf("the event on %s does not decode: %v", ce.Subject, ce.Err)})
}

// seen marks id of agent found, if it was acknowledged.
func (c *checker) seen(agent, id string) {
	if id == "" {
		return
	}
	k := Ack{Agent: agent, ID: id}
	if _, ok := c.acked[k]; ok {
		c.acked[k] = true
	}
}

func (c *checker) agent(id string) *agentState {
	a := c.agents[id]
	if a == nil {
		a = newAgentState(id)
		c.agents[id] = a
	}
	return a
}

// finish runs the checks that need the whole log.
func (c *checker) finish() {
	for _, id := range sortedKeys(c.agents) {
		c.finishAgent(c.agents[id])
		c.finishLinks(c.agents[id])
	}
	for _, id := range sortedKeys(c.superseded) {
		what := "snapshot"
		if c.tombstone[id] == c.latest[id] {
			what = "tombstone (it was deleted)"
		}
		c.notes = append(c.notes, Violation{Kind: KindSuperseded, Agent: id, Seq: c.latest[id],
			Text: fmt.Sprintf("%d events before the agent's %s at %d are still stored (a purge that a crash undid in part); the %s supersedes them, and they were not checked", c.superseded[id], what, c.latest[id], what)})
	}
	for _, k := range sortedStreamKeys(c.streams) {
		c.finishStream(k, c.streams[k])
	}
	for _, a := range sortedAcks(c.acked) {
		if !c.acked[a] && c.agents[a.Agent] != nil && c.agents[a.Agent].deleted {
			c.notes = append(c.notes, Violation{Kind: KindAckDeleted, Agent: a.Agent,
				Text: fmt.Sprintf("%s was acknowledged; the agent was deleted since", a.ID)})
		} else if !c.acked[a] && c.agents[a.Agent] != nil && c.agents[a.Agent].compacted {
			c.notes = append(c.notes, Violation{Kind: KindAckCompacted, Agent: a.Agent,
				Text: fmt.Sprintf("%s was acknowledged; the agent was compacted and the log alone cannot show it", a.ID)})
		} else if !c.acked[a] {
			c.violate(Violation{Kind: KindAckMissing, Agent: a.Agent,
				Text: fmt.Sprintf("%s was acknowledged but is not in the log (no event, turn or fiber with that id)", a.ID)})
		}
	}
}

func (c *checker) report(reads int) Report {
	r := Report{
		Events: c.events, ChunkEvents: c.chunks, Streams: len(c.streams), Acked: len(c.acked), Blobs: c.blobs, Reads: reads,
		Violations: c.out, Notes: c.notes,
	}
	agents := map[string]bool{}
	for id, a := range c.agents {
		agents[id] = true
		r.Fibers += len(a.fibers)
		r.Turns += len(a.turns)
		r.UserMessages += len(a.stored)
	}
	for k := range c.streams {
		agents[k.agent] = true
	}
	r.Agents = len(agents)
	return r
}
