package chathost

import (
	"cmp"
	"context"
	"encoding/base64"
	"errors"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/forever-agents/forever/agentd/host"
	"github.com/forever-agents/forever/chat"
	"github.com/forever-agents/forever/chat/chunk"
	"github.com/forever-agents/forever/eventlog"
)

// The chat reads the console needs, also for every other client: the
// calls waiting for approval, the agent's streams, its token usage. Each
// is a verb (NATS) and a GET (HTTP, http_reads.go).

// Pending is a tool call of the agent's last assistant message that waits
// for a user's approval (chat.Store.PendingApprovals): answer it with the
// approve verb (or POST /v1/agents/{id}/approvals/{toolCallId}).
type Pending = chat.PendingApproval

// Approvals is the reply of the approvals verb.
type Approvals struct {
	Approvals []Pending `json:"approvals"`
}

// approvals lists the calls of the last assistant message that wait for
// approval, once the agent's turn settled.
func (c *Agent) approvals(ctx context.Context) (Approvals, error) {
	if err := c.Settle(ctx); err != nil && !errors.Is(err, chat.ErrTurnActive) {
		return Approvals{Approvals: []Pending{}}, err
	}
	pending, err := c.store.PendingApprovals(c.ID())
	return Approvals{Approvals: pending}, err
}

// Stream pages.
const (
	DefaultStreamsLimit = 50
	MaxStreamsLimit     = 500
)

// StreamsRequest is the payload of the streams verb (GET
// /v1/agents/{id}/streams?cursor=&limit=).
type StreamsRequest struct {
	// Cursor is a StreamsPage's Next: the page of older streams after it.
	Cursor string `json:"cursor,omitempty"`
	// Limit: DefaultStreamsLimit when 0, at most MaxStreamsLimit.
	Limit int `json:"limit,omitempty"`
	// Stream, when set, selects that one stream: the page holds it, or
	// nothing when the agent has no such stream.
	Stream string `json:"stream,omitempty"`
}

// StreamsPage is the reply of the streams verb: the agent's chat streams,
// newest first. Next is the cursor of the next page, "" after the last.
type StreamsPage struct {
	Streams []Stream `json:"streams"`
	Next    string   `json:"next"`
}

// Stream is one chat stream (one turn's output): chunk.StreamInfo with its
// sequences as cursors (strings of digits). Replay it from any cursor
// with GET /v1/agents/{id}/streams/{stream}/chunks?after=, or over NATS
// with replay.Client.Follow.
type Stream struct {
	Stream    string    `json:"stream"`
	RequestID string    `json:"requestId,omitempty"`
	MessageID string    `json:"messageId,omitempty"`
	Status    string    `json:"status"`
	Error     string    `json:"error,omitempty"`
	FirstSeq  string    `json:"firstSeq"`
	LastSeq   string    `json:"lastSeq"`
	Chunks    int       `json:"chunks"`
	StartedAt time.Time `json:"startedAt"`
	UpdatedAt time.Time `json:"updatedAt"`
	Expired   bool      `json:"expired,omitempty"`
}

func streamOf(info chunk.StreamInfo) Stream {
	return Stream{Stream: info.Stream, RequestID: info.RequestID, MessageID: info.MessageID, Status: info.Status,
		Error: info.Error, FirstSeq: seqString(info.FirstSeq), LastSeq: seqString(info.LastSeq), Chunks: info.Chunks,
		StartedAt: info.StartedAt, UpdatedAt: info.UpdatedAt, Expired: info.Expired}
}

func seqString(s eventlog.Seq) string { return strconv.FormatUint(uint64(s), 10) }

// streamCursor is where a page of streams ends: the last stream's start
// time and id, newest first.
func streamCursor(s chunk.StreamInfo) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(s.StartedAt.UnixNano(), 10) + "/" + s.Stream))
}

// olderThan reports whether s comes after the cursor's stream, newest
// first.
func olderThan(s chunk.StreamInfo, at int64, id string) bool {
	t := s.StartedAt.UnixNano()
	return t < at || (t == at && s.Stream < id)
}

// streams pages the agent's streams, newest first, once this node's
// streams view applied the agent's last chunk stored (waitChunks).
func (c *Agent) streams(ctx context.Context, req StreamsRequest) (StreamsPage, error) {
	return streamsPage(ctx, c.log, c.store, c.ID(), req)
}

// viewWait bounds how long a read of an agent's streams waits for this
// node's streams view to apply the agent's last chunk stored; past it the
// read serves what the view holds.
const viewWait = 5 * time.Second

// chunksLog is what waitChunks reads of the log.
type chunksLog interface {
	Stalled() error
	LastSeq(ctx context.Context, f eventlog.Filter) (eventlog.Seq, error)
}

// waitChunks waits, at most viewWait, until store's streams view applied
// the last chunk stored that f selects: right after a turn wrote its
// chunks (on this node or another) the view may not have applied them yet,
// and a read after the turn's answer must show them. It always returns: on
// a timeout or an error, and at once while the views cannot move
// (Log.Stalled), the read serves what the view holds.
func waitChunks(ctx context.Context, lg chunksLog, store *chat.Store, f eventlog.Filter) {
	if lg.Stalled() != nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, viewWait)
	defer cancel()
	if seq, err := lg.LastSeq(ctx, f); err == nil {
		_ = store.WaitForChunks(ctx, seq)
	}
}

// streamsPage is the streams verb of agent: a page of its streams, newest
// first, read once store's streams view applied the agent's last chunk
// (waitChunks).
func streamsPage(ctx context.Context, lg chunksLog, store *chat.Store, agent string, req StreamsRequest) (StreamsPage, error) {
	limit := req.Limit
	switch {
	case limit == 0:
		limit = DefaultStreamsLimit
	case limit < 0 || limit > MaxStreamsLimit:
		return StreamsPage{}, host.ErrBadRequest.Wrapf("limit must be from 1 to %d, got %d", MaxStreamsLimit, limit)
	}
	var at int64
	var after string
	if req.Cursor != "" {
		b, err := base64.RawURLEncoding.DecodeString(req.Cursor)
		ts, id, ok := strings.Cut(string(b), "/")
		n, perr := strconv.ParseInt(ts, 10, 64)
		if err != nil || !ok || perr != nil {
			return StreamsPage{}, host.ErrBadRequest.Wrapf("cursor %q is not a cursor of a streams page", req.Cursor)
		}
		at, after = n, id
	}
	waitChunks(ctx, lg, store, eventlog.Filter{Agent: agent, Chunks: true})
	all, err := store.Streams().List(agent)
	if err != nil {
		return StreamsPage{}, err
	}
	slices.SortFunc(all, func(a, b chunk.StreamInfo) int {
		return cmp.Or(b.StartedAt.Compare(a.StartedAt), strings.Compare(b.Stream, a.Stream))
	})
	page := StreamsPage{Streams: []Stream{}}
	var last chunk.StreamInfo
	for _, s := range all {
		if req.Cursor != "" && !olderThan(s, at, after) || req.Stream != "" && s.Stream != req.Stream {
			continue
		}
		if len(page.Streams) == limit {
			page.Next = streamCursor(last)
			break
		}
		page.Streams = append(page.Streams, streamOf(s))
		last = s
	}
	return page, nil
}
