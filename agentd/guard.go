package agentd

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/internal/backoff"
	"github.com/forever-agents/forever/internal/promreg"
)

// This file is the store guard: it looks at the JetStream streams and KV
// buckets the daemon depends on, notices one that was
// deleted, deleted and created again, or purged whole under the running
// node (an operator's `nats stream rm` or `nats stream purge`), logs it
// once at ERROR naming it and what was lost, and runs its heal: the stream
// is created again and what depends on it rebuilt, live. It also notices
// views that stopped following their stream. What it finds is a readiness
// reason (/readyz 503) until healed.
//
// A purge is seen in JetStream's API audit advisories ($JS.EVENT.ADVISORY.API,
// one per API request of the account): a purge without a subject filter is
// a loss. The purges Forever makes itself (chunk retention, compaction) name
// one subject each and are not. A clustered server's advisory carries no
// request (its leader answers once the purge is applied), so the guard also
// subscribes to the purge requests themselves ($JS.API.STREAM.PURGE.<stream>)
// and takes such an advisory for a whole purge only when it saw a request
// without a filter for that stream in the last purgeAskedFor. Guessing from
// the stream's state instead (every message the last look saw gone) took
// the compaction of a shard's only agent for a whole purge, and stopped
// every agent of the node, many times a minute in the chaos runs of stop 46.
//
// A look reads a stream's info, a JetStream API request that every server
// of the cluster receives and decodes (only the stream's leader answers):
// every node looking at each of the 2K+1 streams each second cost a
// cluster of N nodes N*N*(2K+1) such requests a second, the largest part
// of an idle cluster's CPU at 6 nodes (issue 36, docs/scaling.md). So the
// guard reads a stream's info every GuardRefresh, and at once when an
// advisory names it: its deletion or creation
// ($JS.EVENT.ADVISORY.STREAM.DELETED.<stream>, .CREATED.<stream>) or a
// purge of it (the API audit). The refresh is the backstop for an
// advisory missed while the connection was down.

// GuardInterval is how often the guard checks the views against their
// streams' last sequences, heals a loss not yet healed, and reads the
// info of the streams that are due.
const GuardInterval = time.Second

// GuardRefresh is how often the guard reads a stream's info when no
// advisory names it.
const GuardRefresh = 10 * time.Second

// jsStreamAdvisories are the subjects of JetStream's stream deletion and
// creation advisories, the stream's name last.
var jsStreamAdvisories = []string{"$JS.EVENT.ADVISORY.STREAM.DELETED.*", "$JS.EVENT.ADVISORY.STREAM.CREATED.*"}

// viewStallAfter is how long views may stay behind their stream without
// applying anything before readiness calls them stalled.
const viewStallAfter = 10 * time.Second

// viewRestartAfter is how long views may stay stalled before the guard
// makes their stream's followers start over (eventlog.Log.RestartViews),
// and how long it then waits before doing so again.
const viewRestartAfter = 2 * viewStallAfter

// LossKind says how a guarded stream lost its messages.
type LossKind string

// Losses the guard notices.
const (
	// LossDeleted: the stream is gone.
	LossDeleted LossKind = "deleted"
	// LossRecreated: the stream was deleted and created again by someone
	// else (its creation time changed).
	LossRecreated LossKind = "recreated"
	// LossPurged: every message of the stream was removed.
	LossPurged LossKind = "purged"
)

// Loss describes what a guarded stream lost, as the guard last saw it
// before the loss.
type Loss struct {
	Kind LossKind
	// Msgs and Subjects are how many messages, and on how many subjects,
	// the stream held when the guard last saw it whole.
	Msgs, Subjects uint64
}

// Guarded is a JetStream stream (a KV bucket is the stream KV_<bucket>) the
// guard watches. Add one with Daemon.Guard.
type Guarded struct {
	// Stream is the JetStream stream's name.
	Stream string
	// What names it in logs and readiness: "stream FOREVER_EVENTS",
	// "bucket FOREVER_LEASES".
	What string
	// Unit and Subjects name its messages and subjects in the loss's log
	// line: "events" of "agents".
	Unit, Subjects string
	// Heal is called, from the guard's goroutine, once a loss was noticed:
	// it creates what is missing and rebuilds what depends on it. An error
	// is logged and Heal is called again on the next look. Nil: the loss is
	// only reported, until someone creates the stream again.
	Heal func(ctx context.Context, loss Loss) error
}

// guardState is what the guard knows of one Guarded.
type guardState struct {
	g    Guarded
	seen *jetstream.StreamInfo // the stream as last seen whole, nil before
	// loss is the loss being healed, nil when none.
	loss *Loss
	// healErr is the last Heal failure, nil when healed.
	healErr error
	// healed is when Heal last succeeded, zero before; healedLoss is
	// the loss it healed then.
	healed     time.Time
	healedLoss Loss
	// purged is a whole-stream purge the advisories reported, not yet
	// looked at: how many messages it removed.
	purged *uint64
	// asked are when the whole purges of it requested (no filter) and
	// not yet matched with an advisory were seen, oldest first.
	asked []time.Time
	// looked is when its info was last read, zero before; advised: an
	// advisory named it since.
	looked  time.Time
	advised bool
	// again counts the deletions seen within healAgain of the last heal,
	// and holdUntil is when a heal of the last one may start: a stream
	// deleted again right after its heal is one something else wants
	// gone for a while (a restore deletes it to restore in its place),
	// and healing it at once, again and again, wins every such race.
	again     int
	holdUntil time.Time
}

// healAgain is how soon after a heal another deletion of the stream holds
// its heal back: 1 s the first time, then 2, 4 and at most 8 s.
const healAgain = 10 * time.Second

// due reports whether st's info is to be read at now: never read, an
// advisory or a loss to heal is waiting, or GuardRefresh went by. Under
// guard.mu.
func (st *guardState) due(now time.Time) bool {
	return st.looked.IsZero() || st.advised || st.loss != nil || st.purged != nil || now.Sub(st.looked) >= GuardRefresh
}

// watchedView is a follower of a stream whose progress the guard checks.
type watchedView struct {
	name   string
	stream string
	cursor func() eventlog.Seq
	last   eventlog.Seq // cursor at the last look
	moved  time.Time    // when the cursor last moved, or the view was caught up
	behind eventlog.Seq // how far behind the stream it was at the last look
	// caughtUp: the view reached its stream's end at a look. Only such a
	// view, one that followed and stopped, is restarted: one still
	// replaying since its start (a bootstrap, a catch-up) would start
	// that work over.
	caughtUp bool
	// restarted is when the guard last made the view start over.
	restarted time.Time
}

// guard is the daemon's store guard.
type guard struct {
	logger *slog.Logger
	faults *prometheus.CounterVec
	// restartViews makes the followers of a stream start over, unless
	// they wait for Pebble (it reports whether it did); nil until the
	// event log is open. restartAfter is viewRestartAfter.
	restartViews func(stream string) bool
	restartAfter time.Duration
	// now is the guard's clock (time.Now; tests step it by hand).
	now func() time.Time

	// wake has a value when an advisory made a stream due.
	wake chan struct{}

	mu struct {
		sync.Mutex
		states []*guardState
		views  []*watchedView
	}
}

func newGuard(logger *slog.Logger, reg prometheus.Registerer) (*guard, error) {
	g := &guard{logger: logger.With("subsystem", "guard"), restartAfter: viewRestartAfter, now: time.Now, wake: make(chan struct{}, 1)}
	faults := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "forever_agentd_store_faults_total",
		Help: "Losses of a JetStream stream or bucket the daemon noticed under it, by store and kind (deleted, recreated, purged).",
	}, []string{"store", "kind"})
	var err error
	if g.faults, err = promreg.Register(reg, faults); err != nil {
		return nil, fmt.Errorf("%w: register metrics: %w", ErrConfig, err)
	}
	return g, nil
}

// add watches s from now on.
func (g *guard) add(s Guarded) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, st := range g.mu.states {
		if st.g.Stream == s.Stream {
			st.g = s
			return
		}
	}
	g.mu.states = append(g.mu.states, &guardState{g: s})
}

// watchView checks that a view of stream keeps following it.
func (g *guard) watchView(name, stream string, cursor func() eventlog.Seq) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.mu.views = append(g.mu.views, &watchedView{name: name, stream: stream, cursor: cursor, moved: g.now()})
}

// Guard adds a stream or bucket to those the daemon's guard watches (the
// event log's streams and the lease bucket are watched already). It may be
// called at any time; a Guarded with the same Stream replaces the earlier.
func (d *Daemon) Guard(g Guarded) { d.guard.add(g) }

// run looks every GuardInterval until ctx ends.
func (g *guard) run(ctx context.Context, nc *nats.Conn) error {
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("guard: %w", err)
	}
	sub, err := nc.Subscribe(jsAPIAudit, g.audit)
	if err != nil {
		return fmt.Errorf("guard: subscribe to %s: %w", jsAPIAudit, err)
	}
	defer sub.Unsubscribe()
	asked, err := nc.Subscribe(purgePrefix+"*", g.purgeRequest)
	if err != nil {
		return fmt.Errorf("guard: subscribe to %s*: %w", purgePrefix, err)
	}
	defer asked.Unsubscribe()
	for _, subject := range jsStreamAdvisories {
		sub, err := nc.Subscribe(subject, g.streamAdvisory)
		if err != nil {
			return fmt.Errorf("guard: subscribe to %s: %w", subject, err)
		}
		defer sub.Unsubscribe()
	}
	t := time.NewTicker(GuardInterval)
	defer t.Stop()
	for {
		g.look(ctx, js)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-g.wake:
		}
	}
}

// streamAdvisory takes a stream deletion or creation advisory: the stream
// it names, when guarded, is looked at now.
func (g *guard) streamAdvisory(m *nats.Msg) {
	g.advise(m.Subject[strings.LastIndexByte(m.Subject, '.')+1:])
}

// advise makes the guarded stream named stream due, and wakes the guard.
func (g *guard) advise(stream string) {
	g.mu.Lock()
	found := false
	for _, st := range g.mu.states {
		if st.g.Stream == stream {
			st.advised, found = true, true
		}
	}
	g.mu.Unlock()
	if found {
		select {
		case g.wake <- struct{}{}:
		default:
		}
	}
}

// jsAPIAudit is the subject of JetStream's API audit advisories.
const jsAPIAudit = "$JS.EVENT.ADVISORY.API"

// purgePrefix starts the API subject of a stream purge.
const purgePrefix = "$JS.API.STREAM.PURGE."

// purgeAskedFor is how long a whole purge's request waits for the
// clustered server's advisory of it: the advisory comes once the purge is
// applied, a Raft round after the request; a request that failed gets
// none.
const purgeAskedFor = time.Minute

// wholePurge reports whether a purge request's body (JSON, maybe empty)
// names no subject filter.
func wholePurge(req []byte) bool {
	var r struct {
		Filter string `json:"filter"`
	}
	if len(bytes.TrimSpace(req)) == 0 {
		return true
	}
	return json.Unmarshal(req, &r) == nil && r.Filter == ""
}

// purgeRequest takes one request to purge a stream, seen on its API
// subject: a whole purge of a guarded stream is kept for the advisory of
// it (audit) to find.
func (g *guard) purgeRequest(m *nats.Msg) {
	if !wholePurge(m.Data) {
		return
	}
	name := strings.TrimPrefix(m.Subject, purgePrefix)
	now := g.now()
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, st := range g.mu.states {
		if st.g.Stream == name {
			st.asked = append(st.keptAsked(now), now)
		}
	}
}

// keptAsked returns the whole purges asked of st in the last
// purgeAskedFor. Under guard.mu.
func (st *guardState) keptAsked(now time.Time) []time.Time {
	i := 0
	for i < len(st.asked) && now.Sub(st.asked[i]) > purgeAskedFor {
		i++
	}
	return st.asked[i:]
}

// audit takes one API audit advisory: a purge of a guarded stream without
// a subject filter is recorded for the next look. A clustered server's
// advisory carries no request: it is a whole purge when a whole purge of
// the stream was asked (purgeRequest), one advisory for each request.
func (g *guard) audit(m *nats.Msg) {
	if !bytes.Contains(m.Data, []byte(purgePrefix)) {
		return
	}
	var a struct {
		Subject  string `json:"subject"`
		Request  string `json:"request"`
		Response string `json:"response"`
	}
	if json.Unmarshal(m.Data, &a) != nil || !strings.HasPrefix(a.Subject, purgePrefix) {
		return
	}
	if a.Request != "" && !wholePurge([]byte(a.Request)) {
		return // Forever's own purges name a subject
	}
	// A clustered server's advisory carries no request (the leader
	// answers after the proposal): the request seen on its subject says.
	clustered := a.Request == ""
	var resp struct {
		Success bool   `json:"success"`
		Purged  uint64 `json:"purged"`
	}
	if json.Unmarshal([]byte(a.Response), &resp) != nil || !resp.Success {
		return
	}
	name := strings.TrimPrefix(a.Subject, purgePrefix)
	defer g.advise(name)
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.now()
	for _, st := range g.mu.states {
		if st.g.Stream == name {
			if clustered {
				asked := st.keptAsked(now)
				if len(asked) == 0 {
					st.asked = nil
					continue // a filtered purge: no whole one was asked
				}
				st.asked = asked[1:]
			}
			n := resp.Purged
			if st.purged != nil {
				n += *st.purged
			}
			st.purged = &n
		}
	}
}

// look checks every guarded stream that is due (guardState.due), and
// every watched view against the last sequences the guard knows.
func (g *guard) look(ctx context.Context, js jetstream.JetStream) {
	now := g.now()
	g.mu.Lock()
	var states []*guardState
	for _, st := range g.mu.states {
		if st.due(now) {
			st.advised = false
			states = append(states, st)
		}
	}
	g.mu.Unlock()
	for _, st := range states {
		if ctx.Err() != nil {
			return
		}
		g.lookAt(ctx, js, st)
	}
	lasts := map[string]uint64{}
	g.mu.Lock()
	for _, st := range g.mu.states {
		if st.seen != nil {
			lasts[st.g.Stream] = st.seen.State.LastSeq
		}
	}
	g.mu.Unlock()
	g.lookAtViews(lasts)
}

// lookAt checks one stream: it notices a loss, heals it, and returns the
// stream's info (nil when it could not be read).
func (g *guard) lookAt(ctx context.Context, js jetstream.JetStream, st *guardState) *jetstream.StreamInfo {
	ictx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	var info *jetstream.StreamInfo
	s, err := js.Stream(ictx, st.g.Stream)
	if err == nil {
		info = s.CachedInfo()
	}
	g.mu.Lock()
	seen, loss, purged := st.seen, st.loss, st.purged
	if err == nil {
		st.purged = nil
	}
	g.mu.Unlock()
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
		if loss == nil {
			g.holdHeal(st)
			g.noticed(st, seen, Loss{Kind: LossDeleted})
		}
	case err != nil:
		// JetStream slow or electing: nothing can be said.
		return nil
	case loss != nil:
	case seen != nil && !info.Created.Equal(seen.Created):
		g.noticed(st, seen, Loss{Kind: LossRecreated})
	case purged != nil:
		l := Loss{Kind: LossPurged}
		if seen != nil {
			l.Subjects = seen.State.NumSubjects
		}
		l.Msgs = *purged
		g.noticed(st, nil, l)
	}
	g.mu.Lock()
	loss = st.loss
	held := g.now().Before(st.holdUntil)
	g.mu.Unlock()
	if loss != nil && !held {
		info = g.heal(ctx, js, st, *loss)
	}
	if info != nil {
		g.mu.Lock()
		st.seen, st.looked = info, g.now()
		g.mu.Unlock()
	}
	return info
}

// holdHeal sets when the heal of st's deletion, just noticed, may start:
// at once, unless st was healed within healAgain (see guardState.again).
func (g *guard) holdHeal(st *guardState) {
	now := g.now()
	g.mu.Lock()
	defer g.mu.Unlock()
	if st.healed.IsZero() || now.Sub(st.healed) > healAgain {
		st.again, st.holdUntil = 0, time.Time{}
		return
	}
	st.again++
	hold := backoff.Exp(time.Second, 8*time.Second, st.again)
	st.holdUntil = now.Add(hold)
	g.logger.Warn(fmt.Sprintf("%s deleted again %s after its heal; healing it in %s", st.g.What, now.Sub(st.healed).Round(time.Millisecond), hold),
		"store", st.g.Stream, "again", st.again)
}

// noticed logs a loss once, counts it and records it to heal.
func (g *guard) noticed(st *guardState, seen *jetstream.StreamInfo, loss Loss) {
	if seen != nil {
		loss.Msgs, loss.Subjects = seen.State.Msgs, seen.State.NumSubjects
	}
	what := fmt.Sprintf("was %s", loss.Kind)
	if loss.Kind == LossRecreated {
		what = "was deleted and created again"
	}
	next := "it is created again and what depends on it rebuilt"
	if st.g.Heal == nil {
		next = "it is not healed by agentd: create it again"
	}
	lost := fmt.Sprintf("%d %s", loss.Msgs, st.g.Unit)
	if loss.Subjects > 0 {
		lost += fmt.Sprintf(" of %d %s", loss.Subjects, st.g.Subjects)
	}
	g.logger.Error(fmt.Sprintf("%s %s under the running node: %s lost; %s", st.g.What, what, lost, next),
		"store", st.g.Stream, "kind", string(loss.Kind), "lost_msgs", loss.Msgs, "lost_subjects", loss.Subjects)
	g.faults.WithLabelValues(st.g.Stream, string(loss.Kind)).Inc()
	g.mu.Lock()
	st.loss, st.healErr = &loss, nil
	g.mu.Unlock()
}

// heal runs st's Heal for loss and returns the stream's info once healed,
// nil while it is not.
func (g *guard) heal(ctx context.Context, js jetstream.JetStream, st *guardState, loss Loss) *jetstream.StreamInfo {
	if st.g.Heal == nil {
		s, err := js.Stream(ctx, st.g.Stream)
		if err != nil {
			return nil
		}
		g.mu.Lock()
		st.loss = nil
		g.mu.Unlock()
		return s.CachedInfo()
	}
	hctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	start := time.Now()
	err := st.g.Heal(hctx, loss)
	var info *jetstream.StreamInfo
	if err == nil {
		s, serr := js.Stream(hctx, st.g.Stream)
		if serr != nil {
			err = fmt.Errorf("read it after healing: %w", serr)
		} else {
			info = s.CachedInfo()
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if err != nil {
		if st.healErr == nil || st.healErr.Error() != err.Error() {
			g.logger.Warn(fmt.Sprintf("healing %s failed; trying again", st.g.What), "store", st.g.Stream, "err", err)
		}
		st.healErr = err
		return nil
	}
	g.logger.Info(fmt.Sprintf("%s healed", st.g.What), "store", st.g.Stream, "kind", string(loss.Kind), "took", time.Since(start))
	st.healedLoss = loss
	st.loss, st.healErr, st.healed = nil, nil, g.now()
	return info
}

// lookAtViews notes how far each watched view is behind its stream's last
// sequence, from lasts (stream name to last sequence, as just read). Views
// stalled for restartAfter are made to start over: a follower whose
// consumer stopped delivering without an error (its server died, and the
// client's own recreation of it never got through) opens a new one from
// its stored cursor. Until then readiness names them stalled (reasons).
func (g *guard) lookAtViews(lasts map[string]uint64) {
	now := g.now()
	restart := map[string]string{}
	g.mu.Lock()
	restartViews := g.restartViews
	for _, v := range g.mu.views {
		cur := v.cursor()
		last, ok := lasts[v.stream]
		switch {
		case !ok:
		case eventlog.Seq(last) <= cur:
			v.moved, v.behind, v.caughtUp = now, 0, true
		case cur != v.last:
			v.moved, v.behind = now, 0
		default:
			v.behind = eventlog.Seq(last) - cur
			if restartViews != nil && v.caughtUp && now.Sub(v.moved) > g.restartAfter && now.Sub(v.restarted) > g.restartAfter {
				v.restarted = now
				restart[v.stream] = fmt.Sprintf("views %s: %d events not applied for %s", v.name, v.behind, now.Sub(v.moved).Round(time.Second))
			}
		}
		v.last = cur
	}
	g.mu.Unlock()
	for stream, why := range restart {
		if restartViews(stream) {
			g.logger.Warn("views stalled; making them follow their stream again", "stream", stream, "why", why)
		}
	}
}

// lossShown is how long /readyz lists a healed loss under degraded: a
// heal may take milliseconds, shorter than any probe's period, and the
// loss of data it followed is what an operator must still learn of.
const lossShown = time.Minute

// healedLosses returns the losses healed in the last lossShown, for
// /readyz's degraded list (the node serves; the data is gone).
func (g *guard) healedLosses() []string {
	now := g.now()
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []string
	for _, st := range g.mu.states {
		if st.healed.IsZero() || now.Sub(st.healed) >= lossShown {
			continue
		}
		l := st.healedLoss
		out = append(out, fmt.Sprintf("%s was %s (%d %s of %d %s lost) and was healed %s ago",
			st.g.What, l.Kind, l.Msgs, st.g.Unit, l.Subjects, st.g.Subjects, now.Sub(st.healed).Round(time.Second)))
	}
	return out
}

// reasons returns what the guard finds wrong now, as readiness reasons:
// a stream lost and not yet healed, views that stopped following.
func (g *guard) reasons() (missing, stalled []string) {
	now := g.now()
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, st := range g.mu.states {
		if st.loss == nil {
			continue
		}
		r := fmt.Sprintf("%s was %s and is being healed", st.g.What, st.loss.Kind)
		switch {
		case st.g.Heal == nil:
			r = fmt.Sprintf("%s was %s; agentd does not heal it: create it again", st.g.What, st.loss.Kind)
		case st.healErr != nil:
			r = fmt.Sprintf("%s was %s and cannot be healed yet: %v", st.g.What, st.loss.Kind, st.healErr)
		}
		missing = append(missing, r)
	}
	for _, v := range g.mu.views {
		if v.behind > 0 && now.Sub(v.moved) > viewStallAfter {
			stalled = append(stalled, fmt.Sprintf("views %s stalled: %d events of stream %s not applied for %s",
				v.name, v.behind, v.stream, now.Sub(v.moved).Round(time.Second)))
		}
	}
	return missing, stalled
}

// StoreLostFunc is told that stream, a stream of the event log, lost its
// events under the running node (deleted, or purged whole), once the
// stream exists again and before the views are rebuilt from what it holds
// now. It stops what ran on the lost history; the resume it returns is
// called once the views were rebuilt.
type StoreLostFunc func(ctx context.Context, stream string, loss Loss) (resume func())

// OnStoreLost adds fn to the functions told when the events stream lost
// its events (package host stops the agents, and ends their turns with an
// error). Call it before Run or from a StartFunc.
func (d *Daemon) OnStoreLost(fn StoreLostFunc) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.mu.storeLost = append(d.mu.storeLost, fn)
}

// guardStores watches the event log's streams and the lease bucket, and
// heals each when it is lost under the running node.
func (d *Daemon) guardStores(lg *eventlog.Log, views *eventlog.Follower) {
	d.guard.mu.Lock()
	d.guard.restartViews = func(stream string) bool {
		if lg.Stalled() != nil {
			return false // Pebble cannot write: the views resume once it can
		}
		lg.RestartViews(stream, false)
		return true
	}
	d.guard.mu.Unlock()
	// A sharded log has a stream of each kind per shard: each is guarded,
	// and a loss of one is healed as a loss of its kind.
	for _, name := range lg.EventsStreams() {
		d.Guard(Guarded{Stream: name, What: "stream " + name, Unit: "events", Subjects: "agents",
			Heal: func(ctx context.Context, loss Loss) error { return d.healEvents(ctx, lg, views, name, loss) }})
	}
	for _, name := range lg.ChunksStreams() {
		d.Guard(Guarded{Stream: name, What: "stream " + name, Unit: "chunks", Subjects: "chat streams",
			Heal: func(ctx context.Context, loss Loss) error { return healChunks(ctx, lg, name, loss) }})
	}
	if mgr := d.parts.mgr; mgr != nil {
		d.Guard(Guarded{Stream: "KV_" + mgr.Bucket(), What: "bucket " + mgr.Bucket(), Unit: "keys", Subjects: "keys",
			Heal: func(ctx context.Context, _ Loss) error { return mgr.RestoreBucket(ctx) }})
	}
}

// healChunks creates the chunks stream again when it is missing. A stream
// deleted (or created again by someone) is new to the views, which rebuild
// from it, and to the fences, which read it again. After a purge the
// views keep their rows (a stream whose chunks went answers 410) and the
// fences stay: the turns streaming learn of the loss on their next chunk
// (eventlog.ErrRemoved) and end with an error chunk.
func healChunks(ctx context.Context, lg *eventlog.Log, name string, loss Loss) error {
	if err := lg.EnsureStream(ctx, name); err != nil {
		return err
	}
	if loss.Kind != LossPurged {
		lg.ForgetFences()
		lg.RestartViews(name, false)
	}
	return nil
}

// healEvents creates the events stream again when it is missing, has the
// StoreLostFuncs stop what ran on the lost history, makes the appends go on
// from the stream as it is now, and rebuilds the views from it; it returns
// once they caught up (or ctx ends). name is the stream lost: of a
// sharded log, one shard's, whose loss stops every agent as a loss of the
// events stream (lg.EventsStream, the name the StoreLostFuncs get).
func (d *Daemon) healEvents(ctx context.Context, lg *eventlog.Log, views *eventlog.Follower, name string, loss Loss) error {
	if err := lg.EnsureStream(ctx, name); err != nil {
		return err
	}
	// The views rebuild from every shard: the other shards lost with this
	// one (a restore, or its undo, deletes them one after another) are
	// created again now too, or the rebuild would wait for each one's own
	// heal, up to a heal's 30 s apart (each shard's guard then finds its
	// stream created again, and heals at once).
	for _, n := range lg.EventsStreams() {
		if n == name {
			continue
		}
		if err := lg.EnsureStream(ctx, n); err != nil {
			return err
		}
	}
	stream := lg.EventsStream()
	d.mu.Lock()
	fns := d.mu.storeLost
	d.mu.Unlock()
	var resumes []func()
	defer func() {
		for _, r := range resumes {
			r()
		}
	}()
	// What ran on the lost history stops without writing to the new
	// stream: only the error chunks that end its turns get through.
	lg.HoldEvents(fmt.Errorf("stream %s was %s: events wait until the views are rebuilt", name, loss.Kind))
	for _, fn := range fns {
		if r := fn(ctx, stream, loss); r != nil {
			resumes = append(resumes, r)
		}
	}
	lg.ForgetFences()
	lg.ReleaseEvents()
	gen := lg.RestartViews(stream, true)
	if len(views.Names()) == 0 {
		return nil
	}
	for views.Rebuilds() < gen {
		select {
		case <-ctx.Done():
			return fmt.Errorf("views of %s not rebuilt: %w", stream, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
	last, err := lg.LastSeq(ctx, eventlog.Filter{})
	if err != nil {
		return err
	}
	if err := views.WaitFor(ctx, last); err != nil {
		return fmt.Errorf("views of %s not rebuilt: %w", stream, err)
	}
	return nil
}
