package fiber

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"time"

	"github.com/forever-agents/forever/eventlog"
)

// RunsName is the name of the runs projection.
const RunsName = "runs"

// runsVersion is the schema version of the runs projection; changing it
// rebuilds the view from the log.
const runsVersion = 2

// runsReadableFrom is the oldest runs version that reads version 2's rows
// as they are: version 2 only added Recoveries (omitempty), which version
// 1 ignores. Snapshots label the rows with it, so in a rolling upgrade a
// node of the release before applies what a node of this one compacted.
const runsReadableFrom = 1

// Row is one active fiber in the runs table: a fiber.started not yet
// followed by fiber.completed, fiber.failed or fiber.abandoned.
type Row struct {
	ID    string `json:"id"`
	Agent string `json:"agent"`
	Name  string `json:"name"`
	// Snapshot is the data of the last fiber.stashed, nil before the first.
	Snapshot json.RawMessage `json:"snapshot,omitempty"`
	// Attempt is the attempt of the last fiber.recovered, 0 before any, or
	// the count a later fiber.stashed or op.completed set (attempts: 0 for
	// progress after a recovery, or WithAttempts).
	Attempt int `json:"attempt"`
	// Recoveries counts every fiber.recovered of the fiber; unlike Attempt
	// progress never resets it.
	Recoveries int       `json:"recoveries,omitempty"`
	CreatedAt  time.Time `json:"createdAt"`
	// TraceParent is the W3C traceparent of the span the fiber was
	// started under (fiber.started's), "" without tracing.
	TraceParent string `json:"traceparent,omitempty"`
	// Version is the version of the code that started the fiber
	// (fiber.started's), "" when unversioned. LastVersion is the version
	// a later recovery moved it to (fiber.recovered's), "" while it runs
	// under Version. Both were added without changing runsVersion: only
	// events of this release carry them, so a rebuild gives the same
	// rows, and older readers ignore them.
	Version     string `json:"version,omitempty"`
	LastVersion string `json:"lastVersion,omitempty"`
	// Restarted is set by the fiber.recovered of a VersionRestart and
	// cleared by the fiber's next snapshot: until then, every recovery
	// hands the fiber over as Restarted again.
	Restarted bool `json:"restarted,omitempty"`
}

// RanUnder returns the version the fiber last ran under: LastVersion when
// a recovery moved it, else Version.
func (r Row) RanUnder() string {
	if r.LastVersion != "" {
		return r.LastVersion
	}
	return r.Version
}

// Op is one idempotent step of an active fiber: recorded by op.started,
// completed with its result by op.completed.
type Op struct {
	ID        string          `json:"id"`
	Fiber     string          `json:"fiber"`
	Key       string          `json:"key"`
	Completed bool            `json:"completed"`
	Result    json.RawMessage `json:"result,omitempty"`
}

// Key layout inside the projection (agent ids and fiber ids are subject
// tokens, so they contain no NUL):
//
//	r\x00<agent>\x00<fiber>            Row as JSON
//	o\x00<agent>\x00<fiber>\x00<opID>  Op as JSON
func rowKey(agent, id string) []byte { return []byte("r\x00" + agent + "\x00" + id) }
func rowPrefix(agent string) []byte {
	if agent == "" {
		return []byte("r\x00")
	}
	return []byte("r\x00" + agent + "\x00")
}
func opKey(agent, fiber, op string) []byte {
	return []byte("o\x00" + agent + "\x00" + fiber + "\x00" + op)
}
func opPrefix(agent, fiber string) []byte { return []byte("o\x00" + agent + "\x00" + fiber + "\x00") }

// RunsProjection returns the runs projection: every agent's fiber events
// (Filter{}) applied to one row per active fiber and one row per op of an
// active fiber. Apply ignores other event types and events about fibers it
// has no row for, so it is deterministic over any history. Register it once
// per Log (OpenTable does) and share the Table among all the Runners of the
// process.
func RunsProjection() eventlog.Projection {
	return eventlog.Projection{Name: RunsName, Version: runsVersion, RowsReadableFrom: runsReadableFrom, Filter: eventlog.Filter{}, Apply: applyRuns,
		AgentRows: func(r eventlog.Reader, agent string) iter.Seq2[eventlog.KV, error] {
			return eventlog.Rows(r, nil, [][]byte{rowPrefix(agent), []byte("o\x00" + agent + "\x00")})
		}}
}

// applyRuns is the runs projection's Apply.
func applyRuns(b *eventlog.Batch, e eventlog.Event) error {
	if Carries(e) {
		// An event that carries a fiber's end (CompleteIn): itself,
		// then the end.
		return EachRecord(e, func(x eventlog.Event) error { return applyRuns(b, x) })
	}
	if !isFiberEvent(e.Type) {
		return nil
	}
	var p payload
	if !decodePayload(e.Data, &p) {
		p = payload{}
		if err := json.Unmarshal(e.Data, &p); err != nil {
			// An event of ours we cannot read changes nothing, on every replay.
			return nil
		}
	}
	switch e.Type {
	case EventStarted:
		if p.ID == "" {
			return nil
		}
		row := Row{ID: p.ID, Agent: e.Agent, Name: p.Name, Snapshot: p.Snapshot, TraceParent: p.TraceParent, Version: p.Version}
		if p.CreatedAt != nil {
			row.CreatedAt = p.CreatedAt.UTC()
		}
		if p.OpID != "" { // FirstStep: the first step's op.started
			if err := putOp(b, opKey(e.Agent, p.ID, p.OpID), Op{ID: p.OpID, Fiber: p.ID, Key: p.Key}); err != nil {
				return err
			}
		}
		return putRow(b, rowKey(e.Agent, p.ID), row)
	case EventStashed, EventRecovered:
		row, ok, err := batchRow(b, e.Agent, p.ID)
		if err != nil || !ok {
			return err
		}
		if e.Type == EventStashed {
			row.Snapshot, row.Restarted = p.Snapshot, false
			if p.Attempts != nil && *p.Attempts >= 0 {
				row.Attempt = *p.Attempts // progress reset the count
			}
			if p.NextOpID != "" { // AnnounceStep: the next step's op.started
				if err := putStartedOp(b, e.Agent, p.ID, p.NextOpID, p.NextKey); err != nil {
					return err
				}
			}
		} else {
			row.Attempt = p.Attempt
			row.Recoveries++
			if p.Version != "" {
				// Recovered under another version: the snapshot its
				// policy set (migrated, or null for a restart) with it.
				row.LastVersion, row.Restarted = p.Version, p.Restart
				if p.Snapshot != nil {
					row.Snapshot = p.Snapshot
				}
			}
		}
		return putRow(b, rowKey(e.Agent, p.ID), row)
	case EventCompleted, EventFailed, EventAbandoned:
		if p.ID == "" {
			return nil
		}
		if err := b.Delete(rowKey(e.Agent, p.ID)); err != nil {
			return err
		}
		return b.DeletePrefix(opPrefix(e.Agent, p.ID))
	case EventOpStarted, EventOpCompleted:
		if p.OpID == "" {
			return nil
		}
		if ok, err := hasRow(b, e.Agent, p.Fiber); err != nil || !ok {
			return err
		}
		k := opKey(e.Agent, p.Fiber, p.OpID)
		if e.Type == EventOpStarted {
			if ok, _ := b.Has(k); ok {
				return nil // started again by a rerun: keep what is recorded
			}
			return putOp(b, k, Op{ID: p.OpID, Fiber: p.Fiber, Key: p.Key})
		}
		if p.NextOpID != "" { // ThenStep: the next step's op.started
			if err := putStartedOp(b, e.Agent, p.Fiber, p.NextOpID, p.NextKey); err != nil {
				return err
			}
		}
		op := Op{ID: p.OpID, Fiber: p.Fiber, Key: p.Key, Completed: true, Result: p.Result}
		if v, err := b.Get(k); err == nil {
			var prev Op
			if json.Unmarshal(v, &prev) == nil && op.Key == "" {
				op.Key = prev.Key
			}
		}
		if op.Result == nil {
			op.Result = json.RawMessage("null")
		}
		if p.Snapshot != nil || p.Attempts != nil {
			// A step completed with ThenStash: its snapshot as fiber.stashed.
			// With attempts (and with or without a snapshot): the count it
			// resets to, as progress after a recovery.
			row, _, err := batchRow(b, e.Agent, p.Fiber)
			if err != nil {
				return err
			}
			if p.Snapshot != nil {
				row.Snapshot, row.Restarted = p.Snapshot, false
			}
			if p.Attempts != nil && *p.Attempts >= 0 {
				row.Attempt = *p.Attempts
			}
			if err := putRow(b, rowKey(e.Agent, p.Fiber), row); err != nil {
				return err
			}
		}
		return putOp(b, k, op)
	}
	return nil
}

// putStartedOp records op id (key) of fiber as started, announced by the
// event before the step (ThenStep, AnnounceStep), unless it is recorded.
func putStartedOp(b *eventlog.Batch, agent, fiber, id, key string) error {
	k := opKey(agent, fiber, id)
	if ok, err := b.Has(k); ok || err != nil {
		return err
	}
	return putOp(b, k, Op{ID: id, Fiber: fiber, Key: key})
}

// putRow and putOp write a runs row as json.Marshal would (rowjson.go).
func putRow(b *eventlog.Batch, k []byte, r Row) error {
	data, err := encodeRow(r)
	if err != nil {
		return err
	}
	return b.Set(k, data)
}

func putOp(b *eventlog.Batch, k []byte, o Op) error {
	data, err := encodeOp(o)
	if err != nil {
		return err
	}
	return b.Set(k, data)
}

func batchRow(b *eventlog.Batch, agent, id string) (Row, bool, error) {
	if id == "" {
		return Row{}, false, nil
	}
	v, err := b.Get(rowKey(agent, id))
	if errors.Is(err, eventlog.ErrNotFound) {
		return Row{}, false, nil
	}
	if err != nil {
		return Row{}, false, err
	}
	row, err := decodeRow(agent, id, v)
	return row, err == nil, err
}

// hasRow reports whether fiber id of agent has a row, without decoding
// it: an op event needs only that (its fiber runs), and the row holds the
// fiber's snapshot, which decoding at every op event cost more than the
// rest of the op's apply. Rows are written only by putRow, so a
// row that is present decodes; batchRow's reads still report one that
// does not.
func hasRow(b *eventlog.Batch, agent, id string) (bool, error) {
	if id == "" {
		return false, nil
	}
	return b.Has(rowKey(agent, id))
}

func decodeRow(agent, id string, v []byte) (Row, error) {
	var row Row
	if fastRow(v, &row) {
		return row, nil
	}
	row = Row{}
	if err := json.Unmarshal(v, &row); err != nil {
		return Row{ID: id, Agent: agent}, &eventlog.CorruptError{What: fmt.Sprintf("runs row of fiber %s of agent %s", id, agent), Err: err}
	}
	return row, nil
}

// View is the part of *eventlog.View a Table reads.
type View interface {
	Get(key []byte) ([]byte, error)
	Scan(prefix []byte) iter.Seq2[eventlog.KV, error]
}

// Projector is the part of *eventlog.Projector a Table uses to wait for the
// runs projection.
type Projector interface {
	Ready() <-chan struct{}
	WaitFor(ctx context.Context, seq eventlog.Seq) error
}

// Table reads the runs projection. One Table serves all the Runners of a
// process; it is safe for concurrent use. Reads see what the projection has
// applied: use WaitFor to read past a known sequence.
type Table struct {
	view View
	pr   Projector
}

// NewTable returns a Table reading view (the View of RunsProjection) and
// waiting on pr (its Projector).
func NewTable(view View, pr Projector) *Table { return &Table{view: view, pr: pr} }

// OpenTable registers RunsProjection on lg and returns its Table and
// Projector. The caller runs the Projector (pr.Run(ctx)) before using the
// Table, and stops it before closing lg.
func OpenTable(lg *eventlog.Log) (*Table, *eventlog.Projector, error) {
	pr, err := lg.NewProjector(RunsProjection())
	if err != nil {
		return nil, nil, fmt.Errorf("fiber: open runs table: %w", err)
	}
	v, err := lg.View(RunsName)
	if err != nil {
		return nil, nil, fmt.Errorf("fiber: open runs table: %w", err)
	}
	return NewTable(v, pr), pr, nil
}

// AddTable adds RunsProjection to views, a Follower of lg's events stream,
// and returns its Table, which waits on views: the caller runs views before
// using the Table, and stops it before closing lg.
func AddTable(lg *eventlog.Log, views *eventlog.Follower) (*Table, error) {
	if err := views.Add(RunsProjection()); err != nil {
		return nil, fmt.Errorf("fiber: open runs table: %w", err)
	}
	v, err := lg.View(RunsName)
	if err != nil {
		return nil, fmt.Errorf("fiber: open runs table: %w", err)
	}
	return NewTable(v, views), nil
}

// Ready is closed once the runs projection has caught up with the log as it
// was when its projector started.
func (t *Table) Ready() <-chan struct{} { return t.pr.Ready() }

// WaitFor blocks until the projection has applied stream sequence seq, ctx
// is done, or the projector stopped (eventlog.ErrStopped, or its error).
func (t *Table) WaitFor(ctx context.Context, seq eventlog.Seq) error {
	if seq == 0 {
		return nil
	}
	return t.pr.WaitFor(ctx, seq)
}

// Get returns the row of fiber id of agent, eventlog.ErrNotFound when the
// fiber is not active, or a *eventlog.CorruptError.
func (t *Table) Get(agent, id string) (Row, error) {
	v, err := t.view.Get(rowKey(agent, id))
	if err != nil {
		return Row{}, err
	}
	return decodeRow(agent, id, v)
}

// Rows returns the active fibers of agent ("" for every agent), ordered by
// agent then fiber ID. Rows that cannot be decoded are left out and
// reported, each as a *eventlog.CorruptError naming the fiber, joined in
// the error. A read error of the view (eventlog.ErrClosed, an I/O error)
// returns no rows and that error, which does not match eventlog.ErrCorrupt:
// the caller cannot take a truncated table for the whole. The caller owns
// the slice.
func (t *Table) Rows(agent string) ([]Row, error) {
	var rows []Row
	var errs []error
	for row, err := range t.scan(agent) {
		var ce *eventlog.CorruptError
		if err != nil && !errors.As(err, &ce) {
			return nil, err
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		rows = append(rows, row)
	}
	return rows, errors.Join(errs...)
}

// scan yields the rows of agent ("" for all); a row that cannot be decoded
// is yielded with its Agent and ID (from the key) and a *CorruptError. A
// read error of the view ends the scan: it is yielded last, with a zero Row
// and an error that is not a *CorruptError, and means the rows yielded are
// not all there are.
func (t *Table) scan(agent string) iter.Seq2[Row, error] {
	return func(yield func(Row, error) bool) {
		for kv, err := range t.view.Scan(rowPrefix(agent)) {
			if err != nil {
				yield(Row{}, fmt.Errorf("fiber: read runs table: %w", err))
				return
			}
			parts := bytes.SplitN(kv.Key[2:], []byte{0}, 2)
			if len(parts) != 2 {
				continue
			}
			row, err := decodeRow(string(parts[0]), string(parts[1]), kv.Value)
			if !yield(row, err) {
				return
			}
		}
	}
}

// Op returns op opID of fiber id of agent, with ok false when none is
// recorded.
func (t *Table) Op(agent, id, opID string) (op Op, ok bool, err error) {
	v, err := t.view.Get(opKey(agent, id, opID))
	if errors.Is(err, eventlog.ErrNotFound) {
		return Op{}, false, nil
	}
	if err != nil {
		return Op{}, false, err
	}
	if err := json.Unmarshal(v, &op); err != nil {
		return Op{}, false, &eventlog.CorruptError{What: fmt.Sprintf("op %s of fiber %s of agent %s", opID, id, agent), Err: err}
	}
	return op, true, nil
}

// Ops returns the ops recorded for fiber id of agent, ordered by op ID.
// The caller owns the slice.
func (t *Table) Ops(agent, id string) ([]Op, error) {
	var ops []Op
	for kv, err := range t.view.Scan(opPrefix(agent, id)) {
		if err != nil {
			return ops, fmt.Errorf("fiber: read ops of fiber %s of agent %s: %w", id, agent, err)
		}
		var op Op
		if err := json.Unmarshal(kv.Value, &op); err != nil {
			return ops, &eventlog.CorruptError{What: fmt.Sprintf("op %q of fiber %s of agent %s", kv.Key, id, agent), Err: err}
		}
		ops = append(ops, op)
	}
	return ops, nil
}

// SnapshotRuns decodes the runs view's rows of one agent snapshot part
// (eventlog.Snapshot.Views[RunsName]): its live fibers and their ops, for
// readers of the log alone (package verify).
func SnapshotRuns(sv eventlog.SnapshotView) (rows []Row, ops []Op, err error) {
	for _, kv := range sv.Rows {
		switch {
		case bytes.HasPrefix(kv.Key, []byte("r\x00")):
			var r Row
			if err := json.Unmarshal(kv.Value, &r); err != nil {
				return nil, nil, &eventlog.CorruptError{What: "runs row in a snapshot", Err: err}
			}
			rows = append(rows, r)
		case bytes.HasPrefix(kv.Key, []byte("o\x00")):
			var o Op
			if err := json.Unmarshal(kv.Value, &o); err != nil {
				return nil, nil, &eventlog.CorruptError{What: "op row in a snapshot", Err: err}
			}
			ops = append(ops, o)
		}
	}
	return rows, ops, nil
}
