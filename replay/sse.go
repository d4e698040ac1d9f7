package replay

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"time"

	"github.com/forever-agents/forever/chat/chunk"
	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/internal/apierror"
)

// chatRequest is the part of an AI SDK chat request body the gateway checks:
// the chat id and the body's last message.
type chatRequest struct {
	ID       string            `json:"id"`
	Messages []json.RawMessage `json:"messages"`
}

// readChatBody reads and checks an AI SDK request body as a stream
// (readBody): limit bounds the new message and the other fields, not the
// earlier messages. It returns the body a turn is sent: the last message,
// the other fields, and the history summed up. Errors are
// *apierror.Error: 413 over the limit, 400 wrapping ErrBadRequest else.
func readChatBody(r io.Reader, limit int64) (chatRequest, json.RawMessage, error) {
	return readBody(r, limit, "")
}

// parseChatBody checks an AI SDK request body held whole (the "body" of
// a WebSocket frame, within), as readChatBody does, with no limit but the
// frame's.
func parseChatBody(body json.RawMessage, within string) (chatRequest, json.RawMessage, error) {
	return readBody(bytes.NewReader(body), 1<<50, within)
}

// postChat starts a turn and streams it: POST /v1/chat.
func (g *Gateway) postChat(w http.ResponseWriter, r *http.Request) {
	req, body, err := readChatBody(r.Body, g.cfg.MaxBodyBytes)
	if err != nil {
		g.writeError(w, r, err)
		return
	}
	// A turn whose stream could not be followed would answer an empty
	// 200: refuse it before it starts (429, eventlog.ErrConsumerLimit).
	if err := g.client.CheckFollow(r.Context(), req.ID, ""); err != nil {
		g.writeError(w, r, err)
		return
	}
	t, err := g.send(r.Context(), req.ID, withMultitaskHeader(r, body))
	if err != nil {
		g.writeError(w, r, err)
		return
	}
	g.streamSSE(w, r, req.ID, t.StreamID, t.After, false)
}

// getStream resumes the agent's unfinished turn: GET /v1/chat/{id}/stream.
func (g *Gateway) getStream(w http.ResponseWriter, r *http.Request) {
	agent, err := agentOf(r)
	if err != nil {
		g.writeError(w, r, err)
		return
	}
	after, explicit, err := resumeAfter(r.Header.Get("Last-Event-ID"), r.URL.Query().Get("after"))
	if err != nil {
		g.writeError(w, r, err)
		return
	}
	off, err := g.active(r.Context(), agent)
	if err != nil {
		g.writeError(w, r, err)
		return
	}
	if off.turn.StreamID != "" {
		if err := g.client.CheckFollow(r.Context(), agent, off.turn.StreamID); err != nil {
			g.writeError(w, r, err)
			return
		}
	}
	switch {
	case off.kind == "pending":
		g.streamSSE(w, r, agent, off.turn.StreamID, maxCursor(after, off.turn.After), false)
	case off.kind == "resuming":
		from := maxCursor(after, off.turn.After)
		if err := g.stored(r.Context(), off.info, from); err != nil {
			g.writeError(w, r, err)
			return
		}
		g.streamSSE(w, r, agent, off.turn.StreamID, from, true)
	case explicit && off.turn.StreamID != "":
		if err := g.stored(r.Context(), off.info, after); err != nil {
			g.writeError(w, r, err)
			return
		}
		g.streamSSE(w, r, agent, off.turn.StreamID, after, true)
	default:
		w.WriteHeader(http.StatusNoContent)
	}
}

// resumeAfter returns where a resume starts: the later of the Last-Event-ID
// header and the after query parameter, either may be empty. explicit is
// true when after was given (a finished stream then replays its tail).
// Errors are 400 *apierror.Error wrapping ErrBadCursor, naming the
// parameter.
func resumeAfter(lastEventID, afterParam string) (after Cursor, explicit bool, err error) {
	if lastEventID != "" {
		if after, err = ParseCursor(lastEventID); err != nil {
			return Cursor{}, false, apierror.New(apierror.BadRequest, "the Last-Event-ID header %q is not a cursor: %s", echo(lastEventID), cursorRule).WithCause(err)
		}
	}
	if afterParam != "" {
		c, err := ParseCursor(afterParam)
		if err != nil {
			return Cursor{}, false, apierror.New(apierror.BadRequest, "the after parameter %q is not a cursor: %s", echo(afterParam), cursorRule).WithCause(err)
		}
		after, explicit = maxCursor(after, c), true
	}
	return after, explicit, nil
}

// SSE response headers of the AI SDK UI message stream.
func setSSEHeaders(h http.Header) {
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("Connection", "keep-alive")
	h.Set("X-Vercel-AI-UI-Message-Stream", "v1")
	h.Set("X-Accel-Buffering", "no")
}

// streamSSE writes the chunks of one stream after the cursor as SSE
// events, "id: <cursor>" and "data: <chunk>", then "data: [DONE]" after the
// terminal chunk, or alone when the stream ended at or before the cursor. It
// ends early, without [DONE], when the client goes away
// or the gateway stops; the turn goes on either way.
func (g *Gateway) streamSSE(w http.ResponseWriter, r *http.Request, agent, stream string, after Cursor, mustExist bool) {
	ctx, cancel := g.lifetime(r.Context())
	defer cancel()
	g.metrics.followers.WithLabelValues("sse").Inc()
	defer g.metrics.followers.WithLabelValues("sse").Dec()
	sent := g.metrics.chunks.WithLabelValues("sse")

	rc := http.NewResponseController(w)
	setSSEHeaders(w.Header())
	w.WriteHeader(http.StatusOK)
	if err := rc.Flush(); err != nil {
		return
	}
	buf := make([]byte, 0, 512)
	done := false // whether [DONE] was sent
	for it, err := range g.client.followOn(ctx, agent, stream, after, mustExist) {
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			var ce *eventlog.CorruptError
			if lostPayload(err) {
				g.metrics.lostPayloads.Inc()
			}
			if errors.As(err, &ce) || lostPayload(err) {
				g.logger.Error("skip corrupt chunk", "agent", agent, "stream", stream, "err", err)
				continue
			}
			if e := apiError(err); e.Code == apierror.Gone || e.Code == apierror.NotFound || errors.Is(err, eventlog.ErrConsumerLimit) {
				// For good: the stream ends with an AI SDK error chunk,
				// so the client shows why instead of resuming in vain
				// (or, past the consumer limit, instead of an empty
				// answer: it retries later).
				if errors.Is(err, chunk.ErrExpired) {
					e = expiredFor(agent, err)
				}
				_ = rc.SetWriteDeadline(time.Now().Add(g.cfg.WriteTimeout))
				buf = appendWire(append(buf[:0], "data: "...), chunk.Chunk{Type: chunk.Error, ErrorText: e.Message})
				buf = append(buf, "\n\ndata: [DONE]\n\n"...)
				if _, err := w.Write(buf); err == nil {
					rc.Flush()
				}
				return
			}
			// Transient, still after followOn's tries: the response ends
			// without [DONE] and the client resumes from its last id.
			g.logger.Warn("sse follow", "agent", agent, "stream", stream, "err", err)
			return
		}
		buf = append(buf[:0], "id: "...)
		buf = it.Cursor.AppendText(buf)
		buf = append(buf, "\ndata: "...)
		buf = appendWire(buf, it.Chunk)
		buf = append(buf, "\n\n"...)
		if it.Chunk.Terminal() {
			buf = append(buf, "data: [DONE]\n\n"...)
			done = true
		}
		// A client too slow to take the event within WriteTimeout is
		// dropped; it resumes from its last id.
		_ = rc.SetWriteDeadline(time.Now().Add(g.cfg.WriteTimeout))
		if _, err := w.Write(buf); err != nil {
			g.slowOrGone(agent, stream, err)
			return
		}
		if err := rc.Flush(); err != nil {
			g.slowOrGone(agent, stream, err)
			return
		}
		sent.Inc()
	}
	if done || ctx.Err() != nil {
		return
	}
	// The follow ended without an error or a terminal chunk after the
	// cursor: the stream ended at or before it (a resume at its terminal
	// chunk). The response still ends with the [DONE] a stock AI SDK
	// client waits for.
	_ = rc.SetWriteDeadline(time.Now().Add(g.cfg.WriteTimeout))
	if _, err := w.Write([]byte("data: [DONE]\n\n")); err == nil {
		rc.Flush()
	}
}

// slowOrGone logs a streaming client dropped for not reading in time; a
// client that went away is not news.
func (g *Gateway) slowOrGone(agent, stream string, err error) {
	if errors.Is(err, os.ErrDeadlineExceeded) {
		g.metrics.slow.Inc()
		g.logger.Info("slow client disconnected; it resumes from its last cursor", "agent", agent, "stream", stream, "timeout", g.cfg.WriteTimeout)
	}
}
