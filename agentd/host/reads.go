package host

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"time"

	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/fiber"
	"github.com/forever-agents/forever/internal/apierror"
)

// The reads the console needs, also for every other client: the log verb
// (an agent's events, paged) and the fibers verb with ops. They write
// nothing.

// Log page sizes and bounds.
const (
	DefaultLogLimit = 100
	MaxLogLimit     = 1000
	// MaxLogData is the most bytes of an event's data a log page carries;
	// a larger event is sent without its data (Truncated, Size).
	MaxLogData = 16 << 10
	// logScanFactor bounds what one page with a type filter reads: at
	// most this many times its limit, then it ends early (More).
	logScanFactor = 20
)

// LogRequest is the payload of the log verb (GET /v1/agents/{id}/log
// takes the same as query parameters).
type LogRequest struct {
	// After is a cursor, a stream sequence as a string of digits: the
	// page starts after it. Empty or "0": from the agent's first event.
	After string `json:"after,omitempty"`
	// Limit is the most events of the page: DefaultLogLimit when 0, at
	// most MaxLogLimit.
	Limit int `json:"limit,omitempty"`
	// Type keeps the events whose type starts with one of its
	// comma-separated prefixes ("fiber.,op."); empty keeps all.
	Type string `json:"type,omitempty"`
}

// LogPage is the reply of the log verb: the agent's events after the
// cursor, in order. Next is the cursor after the last event the page read
// (the request's cursor when it read none): pass it as after for the next
// page, or to follow the log. More is set when events were stored past it
// when the page was read.
type LogPage struct {
	Events []LogEvent `json:"events"`
	Next   string     `json:"next"`
	More   bool       `json:"more"`
}

// LogEvent is one event of a log page. Seq is its cursor. Data is left
// out (Truncated) past MaxLogData bytes; Size is its size. A compaction
// snapshot (eventlog.TypeSnapshot) carries a summary instead of its rows:
// {"upto", "part", "parts", "views": {name: rows}}. Writer is the node
// and lease epoch it was appended under, when fenced.
type LogEvent struct {
	Seq    string    `json:"seq"`
	Type   string    `json:"type"`
	ID     string    `json:"id"`
	Time   time.Time `json:"time"`
	Stream string    `json:"stream,omitempty"`
	// Completes is the fiber the event also ends, as a fiber.completed
	// would (record format 11: a turn.completed carries its fiber's end).
	Completes string          `json:"completes,omitempty"`
	Data      json.RawMessage `json:"data,omitempty"`
	Size      int             `json:"size"`
	Truncated bool            `json:"truncated,omitempty"`
	Writer    *LogWriter      `json:"writer,omitempty"`
}

// LogWriter is the owner an event was appended under.
type LogWriter struct {
	Node  string `json:"node"`
	Epoch uint64 `json:"epoch"`
}

// snapshotSummary is what a log page shows of a compaction snapshot.
type snapshotSummary struct {
	Upto  string         `json:"upto"`
	Part  int            `json:"part"`
	Parts int            `json:"parts"`
	Views map[string]int `json:"views"`
}

// ParseCursor reads a cursor sent by a client: a string of digits, empty
// for 0. Errors wrap ErrBadRequest naming field.
func ParseCursor(field, s string) (eventlog.Seq, error) {
	if s == "" {
		return 0, nil
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, ErrBadRequest.Wrapf("the %s parameter %q is not a cursor: %s", field, truncateText(s, 64), apierror.CursorRule)
	}
	return eventlog.Seq(n), nil
}

func truncateText(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// readLog answers the log verb from the log itself: any node reads it, the
// agent is not activated. An agent without events gets an empty page.
func (h *Host) readLog(ctx context.Context, cmd Command) (any, error) {
	var req LogRequest
	if err := decodePayload(cmd.Data, &req); err != nil {
		return nil, err
	}
	after, err := ParseCursor("after", req.After)
	if err != nil {
		return nil, err
	}
	limit := req.Limit
	switch {
	case limit == 0:
		limit = DefaultLogLimit
	case limit < 0 || limit > MaxLogLimit:
		return nil, ErrBadRequest.Wrapf("limit must be from 1 to %d, got %d", MaxLogLimit, limit)
	}
	var prefixes []string
	for p := range strings.SplitSeq(req.Type, ",") {
		if p = strings.TrimSpace(p); p != "" {
			prefixes = append(prefixes, p)
		}
	}
	if h.deps == nil {
		return nil, ErrUnavailable.Wrapf("starting up")
	}
	lg := h.deps.Log
	f := eventlog.Filter{Agent: cmd.Agent}
	last, err := lg.LastSeq(ctx, f)
	if err != nil {
		return nil, err
	}
	page := LogPage{Events: []LogEvent{}}
	cur, scanned := after, 0
	for cur < last && len(page.Events) < limit && scanned < limit*logScanFactor {
		n := limit - len(page.Events)
		if len(prefixes) > 0 {
			n = min(max(n, 64), limit*logScanFactor-scanned)
		}
		evs, err := lg.Read(ctx, f, cur, n)
		if err != nil {
			return nil, err
		}
		if len(evs) == 0 {
			break
		}
		for _, e := range evs {
			scanned++
			cur = e.Seq
			if keepType(e.Type, prefixes) || (e.Completes != "" && keepType(fiber.EventCompleted, prefixes)) {
				// An event that carries a fiber's end (record format
				// 11) is kept where its fiber.completed would be.
				page.Events = append(page.Events, logEvent(e))
				if len(page.Events) == limit {
					break
				}
			}
		}
	}
	page.Next = strconv.FormatUint(uint64(cur), 10)
	page.More = cur < last
	return page, nil
}

func keepType(typ string, prefixes []string) bool {
	if len(prefixes) == 0 {
		return true
	}
	for _, p := range prefixes {
		if strings.HasPrefix(typ, p) {
			return true
		}
	}
	return false
}

// logEvent is e as a log page shows it.
func logEvent(e eventlog.Event) LogEvent {
	le := LogEvent{Seq: strconv.FormatUint(uint64(e.Seq), 10), Type: e.Type, ID: e.ID, Time: e.Time,
		Stream: e.Stream, Completes: e.Completes, Size: len(e.Data)}
	if e.Writer.Node != "" {
		le.Writer = &LogWriter{Node: e.Writer.Node, Epoch: e.Writer.Epoch}
	}
	switch {
	case e.Type == eventlog.TypeSnapshot:
		var s eventlog.Snapshot
		if json.Unmarshal(e.Data, &s) == nil {
			sum := snapshotSummary{Upto: strconv.FormatUint(uint64(s.Upto), 10), Part: s.Part, Parts: s.Parts, Views: map[string]int{}}
			for name, v := range s.Views {
				sum.Views[name] = len(v.Rows)
			}
			le.Data, _ = json.Marshal(sum)
		}
	case len(e.Data) > MaxLogData:
		le.Truncated = true
	default:
		le.Data = e.Data
	}
	return le
}

// FibersRequest is the payload of the fibers verb: with Ops, each fiber
// comes with its steps (GET /v1/agents/{id}/fibers?ops=true).
type FibersRequest struct {
	Ops bool `json:"ops,omitempty"`
}

// OpInfo is one step of a fiber in the fibers verb's reply.
type OpInfo struct {
	ID        string          `json:"id"`
	Key       string          `json:"key"`
	Completed bool            `json:"completed"`
	Result    json.RawMessage `json:"result,omitempty"`
}

// fibers answers the fibers verb from the runs view.
func (h *Host) fibers(cmd Command) (any, error) {
	var req FibersRequest
	if err := decodePayload(cmd.Data, &req); err != nil {
		return nil, err
	}
	rows, err := h.table.Rows(cmd.Agent)
	if err != nil {
		return nil, err
	}
	out := make([]FiberInfo, 0, len(rows))
	for _, r := range rows {
		fi := FiberInfo{ID: r.ID, Name: r.Name, Attempt: r.Attempt, Recoveries: r.Recoveries, CreatedAt: r.CreatedAt.Format("2006-01-02T15:04:05.000Z07:00"), Snapshot: r.Snapshot,
			Version: r.Version, LastVersion: r.LastVersion}
		if req.Ops {
			ops, err := h.table.Ops(cmd.Agent, r.ID)
			if err != nil {
				return nil, err
			}
			fi.Ops = opInfos(ops)
		}
		out = append(out, fi)
	}
	return out, nil
}

func opInfos(ops []fiber.Op) []OpInfo {
	out := make([]OpInfo, 0, len(ops))
	for _, o := range ops {
		out = append(out, OpInfo{ID: o.ID, Key: o.Key, Completed: o.Completed, Result: o.Result})
	}
	return out
}
