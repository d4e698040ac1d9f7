package chathost

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/forever-agents/forever/agentd"
	"github.com/forever-agents/forever/agentd/host"
	"github.com/forever-agents/forever/blob"
	"github.com/forever-agents/forever/chat/chunk"
	"github.com/forever-agents/forever/internal/apierror"
	"github.com/forever-agents/forever/replay"
)

// Chunk pages.
const (
	DefaultChunksLimit = 200
	MaxChunksLimit     = 1000
	// chunksWait is how long a page of a live stream waits for chunks
	// not yet written before it answers with what it has.
	chunksWait = 500 * time.Millisecond
)

// ChunksPage is the reply of GET /v1/agents/{id}/streams/{stream}/chunks:
// the chunks stored after the cursor, in order, each with its cursor.
// Next is the cursor to ask after for the rest (the last chunk's, or the
// request's when there was none); Done is true once the page holds the
// stream's terminal chunk (finish, error, abort): there is nothing after.
type ChunksPage struct {
	Chunks []ChunkItem `json:"chunks"`
	Next   string      `json:"next"`
	Done   bool        `json:"done"`
}

// ChunkItem is one chunk of a stream and its cursor.
type ChunkItem struct {
	Cursor string      `json:"cursor"`
	Chunk  chunk.Chunk `json:"chunk"`
}

// AttachReads serves GET and PUT /v1/agents/{id}/budget (the budget verb:
// read, or set with a BudgetRequest body); POST
// /v1/agents/{id}/approvals/{toolCallId} with
// {"approved": bool, "reason": "..."}: the approve verb for one call that
// waits (GET /v1/agents/{id}/approvals lists them), its reply as the
// verb's; and GET /v1/agents/{id}/streams/{stream}/chunks?after=&limit=
// on d's HTTP server: a page of a chat stream replayed from any cursor
// (after: a cursor, "0" or absent for the start; limit: DefaultChunksLimit
// when absent, at most MaxChunksLimit). A live stream's page answers with
// the chunks written so far (after waiting briefly for the first). Unknown
// agent or stream: 404; chunks removed by retention: 410. Any node
// answers, from the log. The console replays streams with it. It also
// serves POST /v1/chat/{id}/fork (fork.go).
func AttachReads(d *agentd.Daemon, h *host.Host) error {
	return d.OnStart(func(ctx context.Context, deps *agentd.Deps) error {
		js, err := jetstream.New(deps.Conn)
		if err != nil {
			return err
		}
		client := replay.NewClient(deps.Log, replay.WithBlobs(blob.NewReader(js, "")))
		attachFork(d, h)
		d.Handle("GET /v1/agents/{id}/streams/{stream}/chunks", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			page, err := readChunks(r, h, client)
			if err != nil {
				writeError(w, err)
				return
			}
			b, err := json.Marshal(page)
			if err != nil {
				writeError(w, err)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Cache-Control", "no-store")
			w.Write(append(b, '\n'))
		}))
		d.Handle("GET /v1/agents/{id}/budget", serveBudget(h))
		d.Handle("PUT /v1/agents/{id}/budget", serveBudget(h))
		d.Handle("POST /v1/agents/{id}/approvals/{toolCallId}", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			var body struct {
				Approved *bool  `json:"approved"`
				Reason   string `json:"reason"`
			}
			dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10))
			if err := dec.Decode(&body); err != nil || body.Approved == nil {
				apierror.New(apierror.BadRequest, "the body must be {\"approved\": true|false, \"reason\": \"...\"}").WriteHTTP(w)
				return
			}
			host.ServeCommand(w, r, h, "approve", approveRequest{ToolCallID: r.PathValue("toolCallId"),
				Approved: body.Approved, Reason: body.Reason})
		}))
		return nil
	})
}

func writeError(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, chunk.ErrExpired):
		apierror.New(apierror.Gone, "chunks expired: retention removed this stream's chunks").WithCause(err).WriteHTTP(w)
	case errors.Is(err, replay.ErrUnknownStream), errors.Is(err, chunk.ErrUnknownStream):
		apierror.New(apierror.NotFound, "this agent has no such stream").WithCause(err).WriteHTTP(w)
	default:
		host.ClientError(err).WriteHTTP(w)
	}
}

func readChunks(r *http.Request, h *host.Host, client *replay.Client) (ChunksPage, error) {
	agent, stream := r.PathValue("id"), r.PathValue("stream")
	if _, err := h.TypeOf(agent); err != nil {
		return ChunksPage{}, err
	}
	q := r.URL.Query()
	var after replay.Cursor
	if s := q.Get("after"); s != "" {
		c, err := replay.ParseCursor(s)
		if err != nil {
			return ChunksPage{}, apierror.New(apierror.BadRequest, "the after parameter %q is not a cursor: %s", apierror.Echo(s), apierror.CursorRule)
		}
		after = c
	}
	limit := DefaultChunksLimit
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > MaxChunksLimit {
			return ChunksPage{}, apierror.New(apierror.BadRequest, "limit must be a number from 1 to %d, got %q", MaxChunksLimit, s)
		}
		limit = n
	}
	ctx, cancel := context.WithTimeout(r.Context(), chunksWait)
	defer cancel()
	page := ChunksPage{Chunks: []ChunkItem{}, Next: after.String()}
	// Follow ends by itself after the terminal chunk, or at once for a
	// cursor at or past it: Done. It stops early for the limit or the wait.
	page.Done = true
	for it, err := range client.Follow(ctx, agent, stream, after) {
		if err != nil {
			if ctx.Err() != nil && r.Context().Err() == nil {
				page.Done = false // a live stream: what was written so far
				break
			}
			return ChunksPage{}, err
		}
		page.Chunks = append(page.Chunks, ChunkItem{Cursor: it.Cursor.String(), Chunk: it.Chunk})
		page.Next = it.Cursor.String()
		if it.Chunk.Terminal() {
			break
		}
		if len(page.Chunks) == limit {
			page.Done = false
			break
		}
	}
	return page, nil
}
