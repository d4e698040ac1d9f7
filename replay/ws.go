package replay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/coder/websocket"
	"github.com/coder/websocket/wsjson"
	"github.com/forever-agents/forever/chat/chunk"
	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/internal/apierror"
)

// wsSendTimeout bounds a "chat" frame's Chats.Send: the connection's ctx
// ends only when the gateway stops, and the read loop waits for the send.
const wsSendTimeout = 30 * time.Second

// wsIn is a frame from the client.
type wsIn struct {
	Type      string `json:"type"`
	RequestID string `json:"requestId,omitempty"`
	// ProbeID is an opaque id of a "resume" request, echoed in its offer.
	ProbeID string          `json:"probeId,omitempty"`
	Body    json.RawMessage `json:"body,omitempty"`
}

// wsOut is a frame to the client; see the package doc for each type.
type wsOut struct {
	Type      string     `json:"type"`
	RequestID string     `json:"requestId,omitempty"`
	StreamID  string     `json:"streamId,omitempty"`
	MessageID string     `json:"messageId,omitempty"`
	Cursor    string     `json:"cursor,omitempty"`
	Chunk     *wireChunk `json:"chunk,omitempty"`
	Replay    *bool      `json:"replay,omitempty"`
	Status    string     `json:"status,omitempty"`
	Stopped   *bool      `json:"stopped,omitempty"`
	Reason    string     `json:"reason,omitempty"`
	ProbeID   string     `json:"probeId,omitempty"`
	Code      int        `json:"code,omitempty"`
	Error     string     `json:"error,omitempty"`
}

// getWS serves the WebSocket resume handshake: GET /v1/chat/{id}/ws.
func (g *Gateway) getWS(w http.ResponseWriter, r *http.Request) {
	agent, err := agentOf(r)
	if err != nil {
		g.writeError(w, r, err)
		return
	}
	if err := checkUpgrade(r); err != nil {
		g.writeError(w, r, err)
		return
	}
	c, err := websocket.Accept(w, r, &websocket.AcceptOptions{OriginPatterns: g.cfg.AllowedOrigins})
	if err != nil {
		return // Accept answered the request
	}
	defer c.CloseNow()
	c.SetReadLimit(g.cfg.MaxBodyBytes)
	g.metrics.followers.WithLabelValues("ws").Inc()
	defer g.metrics.followers.WithLabelValues("ws").Dec()

	ctx, cancel := g.lifetime(context.WithoutCancel(r.Context()))
	defer cancel()
	s := &wsSession{g: g, c: c, agent: agent}
	readDone := make(chan struct{})
	closer := make(chan struct{})
	go func() {
		defer close(closer)
		select {
		case <-ctx.Done():
			// Stopping: say so, which also ends the read loop.
			c.Close(websocket.StatusGoingAway, "server stopping")
		case <-readDone:
		}
	}()
	err = s.run(ctx)
	close(readDone)
	s.stopFollow()
	cancel()
	<-closer
	if err == nil {
		c.Close(websocket.StatusNormalClosure, "")
	}
}

// checkUpgrade answers, in the API's error shape, a request to the
// WebSocket endpoint that is not a WebSocket handshake (websocket.Accept
// would answer it in plain text).
func checkUpgrade(r *http.Request) error {
	if !headerHas(r.Header, "Connection", "upgrade") || !headerHas(r.Header, "Upgrade", "websocket") ||
		r.Header.Get("Sec-WebSocket-Version") != "13" || r.Header.Get("Sec-WebSocket-Key") == "" {
		return badRequest("this endpoint is a WebSocket: open it with a WebSocket client (Connection: Upgrade, Upgrade: websocket, Sec-WebSocket-Version: 13)")
	}
	return nil
}

// headerHas reports whether header name lists token (comma-separated,
// case folded).
func headerHas(h http.Header, name, token string) bool {
	for _, v := range h.Values(name) {
		for _, t := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}

// wsSession is one WebSocket connection. Its fields are owned by the read
// loop (run); the follow goroutine only writes frames.
type wsSession struct {
	g     *Gateway
	c     *websocket.Conn
	agent string

	offered offer // last offer sent
	follow  *wsFollow
}

// wsFollow is the goroutine streaming one turn to the connection.
type wsFollow struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// write sends one frame, bounded by GatewayConfig.WriteTimeout alone. The connection's
// lifetime ctx must not bound it: coder/websocket closes the connection when
// a write's ctx ends, even just after the frame went out, and a stop would
// then cut the TCP connection before the closer's going-away frame.
func (s *wsSession) write(ctx context.Context, v wsOut) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.g.cfg.WriteTimeout)
	defer cancel()
	return wsjson.Write(ctx, s.c, v)
}

// writeErr sends err as an error frame, {"type":"error","code":N,
// "error":"..."} (see apiError), with requestId when it concerns one.
func (s *wsSession) writeErr(ctx context.Context, requestID string, err error) error {
	e := apiError(err)
	if e.Code >= 500 {
		s.g.logger.Warn("websocket request failed", "agent", s.agent, "code", e.Code, "err", err)
	}
	return s.write(ctx, wsOut{Type: "error", RequestID: requestID, Error: e.Message, Code: e.Code})
}

// run offers the agent's turn, then answers client frames until the
// connection ends. It returns nil when the client closed normally.
func (s *wsSession) run(ctx context.Context) error {
	if err := s.offer(ctx, ""); err != nil {
		return err
	}
	for {
		// Read is not bound to ctx: the closer goroutine ends it on stop,
		// after sending a proper close frame.
		typ, data, err := s.c.Read(context.WithoutCancel(ctx))
		if err != nil {
			if websocket.CloseStatus(err) == websocket.StatusNormalClosure || websocket.CloseStatus(err) == websocket.StatusGoingAway {
				return nil
			}
			return err
		}
		in, err := decodeFrame(typ, data)
		if err != nil {
			// A bad frame is answered; the connection goes on.
			if err := s.writeErr(ctx, "", err); err != nil {
				return err
			}
			continue
		}
		if err := s.handle(ctx, in); err != nil {
			return err
		}
	}
}

// decodeFrame decodes a client frame: a text message of JSON {type, ...}.
// Errors are 400 *apierror.Error wrapping ErrBadRequest, answered with an
// error frame.
func decodeFrame(typ websocket.MessageType, data []byte) (wsIn, error) {
	var in wsIn
	if typ != websocket.MessageText {
		return in, badRequest(`the frame is binary: send text frames of JSON {"type": ...}`)
	}
	if err := apierror.Decode(data, &in, apierror.Subject("the frame")); err != nil {
		return in, apierror.From(err).WithCause(fmt.Errorf("%w: %w", ErrBadRequest, err))
	}
	return in, nil
}

// chatFrameBody checks the body of a "chat" frame on agent's connection:
// an AI SDK request for that chat. Errors wrap ErrBadRequest.
func chatFrameBody(agent string, body json.RawMessage) (json.RawMessage, error) {
	req, body, err := parseChatBody(body, "body")
	if err != nil {
		return nil, err
	}
	if req.ID != agent {
		return nil, badRequest(`"body.id" %q is not this connection's chat %q: open /v1/chat/{id}/ws for that chat`, echo(req.ID), echo(agent))
	}
	return body, nil
}

// handle answers one client frame. An error ends the connection.
func (s *wsSession) handle(ctx context.Context, in wsIn) error {
	switch in.Type {
	case "resume":
		return s.offer(ctx, in.ProbeID)
	case "ack":
		return s.ack(ctx, in.RequestID)
	case "chat":
		body, err := chatFrameBody(s.agent, in.Body)
		if err != nil {
			return s.writeErr(ctx, "", err)
		}
		sctx, cancel := context.WithTimeout(ctx, wsSendTimeout)
		t, err := s.g.send(sctx, s.agent, body)
		cancel()
		if err != nil {
			return s.writeErr(ctx, "", err)
		}
		s.stopFollow()
		if err := s.write(ctx, wsOut{Type: "started", RequestID: t.RequestID, StreamID: t.StreamID, MessageID: t.MessageID, Cursor: t.After.String()}); err != nil {
			return err
		}
		// The turn is this connection's offer now: an ack of it replays
		// it from its start, like an ack of a resuming turn.
		s.offered = offer{kind: "pending", turn: t}
		s.startFollow(ctx, t, Cursor{}, false)
		return nil
	case "stop":
		stopped, err := s.g.cfg.Chats.Stop(ctx, s.agent)
		if err != nil {
			return s.writeErr(ctx, "", err)
		}
		return s.write(ctx, wsOut{Type: "stopped", Stopped: &stopped})
	default:
		return s.writeErr(ctx, "", badRequest(`unknown frame type %q: send "resume", "ack", "chat" or "stop"`, echo(in.Type)))
	}
}

// ack answers {"type":"ack","requestId"}, as the Cloudflare agents'
// handleResumeAck does:
//
//   - the turn offered (resuming or pending): whatever this connection was
//     streaming stops, and the turn's whole buffer is replayed from its
//     start, then live; every ack does this again;
//   - another request while a turn is offered: ignored (a stale ack; the
//     offer of the turn that runs is on its way);
//   - nothing running: the latest turn, if it is the one acked, is replayed
//     whole (it ended between offer and ack, or the client wants it
//     again); any other request gets {"type":"done","requestId",
//     "replay":true} at once, so the client's resume does not wait.
func (s *wsSession) ack(ctx context.Context, requestID string) error {
	if requestID == "" {
		return s.writeErr(ctx, "", badRequest(`the ack has no "requestId": send the requestId of the offer it answers`))
	}
	o := s.offered
	active := o.kind == "resuming" || o.kind == "pending"
	switch {
	case active && requestID != o.turn.RequestID:
		return nil
	case !active && (o.turn.RequestID == "" || requestID != o.turn.RequestID):
		replayed := true
		return s.write(ctx, wsOut{Type: "done", RequestID: requestID, Replay: &replayed})
	}
	if o.kind != "pending" {
		if err := s.g.stored(ctx, o.info, o.turn.After); err != nil {
			// 410 for chunks retention removed: nothing to stream.
			return s.writeErr(ctx, requestID, err)
		}
	}
	s.stopFollow()
	upTo, err := s.g.cfg.Log.LastSeq(ctx, eventlog.Filter{Agent: s.agent, Stream: o.turn.StreamID})
	if err != nil {
		return s.writeErr(ctx, requestID, err)
	}
	s.startFollow(ctx, o.turn, CursorAt(upTo), true)
	return nil
}

// noneIdle is the reason of a "none" offer: no turn is running, pending or
// failed unseen (the Cloudflare protocol's "idle"; its other reason,
// "continuation-owned", has no counterpart here: any connection may
// resume a turn).
const noneIdle = "idle"

// offer sends what a resume would stream: resuming, pending or none. An
// offer answering {"type":"resume","probeId"} echoes the probe id; the
// offer sent on connect has none. Offers are never deduplicated: a client
// that connects and then asks gets two, and acks one of them.
func (s *wsSession) offer(ctx context.Context, probeID string) error {
	o, err := s.g.active(ctx, s.agent)
	if err != nil {
		return s.writeErr(ctx, "", err)
	}
	if o.kind == "none" && o.ended == chunk.StatusError && o.turn.StreamID != "" {
		// The last turn failed: offer it, so a client that reconnects
		// after the failure learns of it (its error chunk, done "error").
		o.kind = "resuming"
	}
	s.offered = o
	switch o.kind {
	case "resuming":
		return s.write(ctx, wsOut{Type: "resuming", RequestID: o.turn.RequestID, StreamID: o.turn.StreamID, MessageID: o.turn.MessageID, Status: o.ended, ProbeID: probeID})
	case "pending":
		return s.write(ctx, wsOut{Type: "pending", RequestID: o.turn.RequestID, ProbeID: probeID})
	default:
		return s.write(ctx, wsOut{Type: "none", Reason: noneIdle, ProbeID: probeID})
	}
}

// stopFollow cancels the running follow, if any, and waits for it.
func (s *wsSession) stopFollow() {
	if s.follow != nil {
		s.follow.cancel()
		<-s.follow.done
		s.follow = nil
	}
}

// startFollow streams turn t from t.After: with replay, the chunks up to
// upTo (stored when the client acknowledged) are flagged replay and followed
// by replayComplete; later ones are live.
func (s *wsSession) startFollow(ctx context.Context, t Turn, upTo Cursor, replay bool) {
	fctx, cancel := context.WithCancel(ctx)
	f := &wsFollow{cancel: cancel, done: make(chan struct{})}
	s.follow = f
	go func() {
		defer close(f.done)
		err := s.stream(fctx, t, upTo, replay)
		if err == nil || fctx.Err() != nil {
			return
		}
		if e := apiError(err); e.Code == apierror.Gone || e.Code == apierror.NotFound {
			// For good (chunks expired, no such stream): say so; the
			// connection stays open for another turn.
			if errors.Is(err, chunk.ErrExpired) {
				e = expiredFor(s.agent, err)
			}
			s.writeErr(fctx, t.RequestID, e)
			return
		}
		s.g.logger.Info("websocket follow", "agent", s.agent, "stream", t.StreamID, "err", err)
		s.c.Close(websocket.StatusInternalError, "internal error; reconnect to resume")
	}()
}

func (s *wsSession) stream(ctx context.Context, t Turn, upTo Cursor, replaying bool) error {
	sent := s.g.metrics.chunks.WithLabelValues("ws")
	last := t.After
	complete := func() error {
		replaying = false
		return s.write(ctx, wsOut{Type: "replayComplete", RequestID: t.RequestID, Cursor: last.String()})
	}
	if replaying && upTo.Compare(t.After) <= 0 {
		if err := complete(); err != nil {
			return err
		}
	}
	for it, err := range s.g.client.followOn(ctx, s.agent, t.StreamID, t.After, false) {
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			var ce *eventlog.CorruptError
			if lostPayload(err) {
				s.g.metrics.lostPayloads.Inc()
			}
			if errors.As(err, &ce) || lostPayload(err) {
				s.g.logger.Error("skip corrupt chunk", "agent", s.agent, "stream", t.StreamID, "err", err)
				continue
			}
			return err
		}
		isReplay := replaying && it.Cursor.Compare(upTo) <= 0
		if replaying && !isReplay {
			if err := complete(); err != nil {
				return err
			}
		}
		wc := wireChunk(it.Chunk)
		if err := s.write(ctx, wsOut{Type: "chunk", RequestID: t.RequestID, Cursor: it.Cursor.String(), Chunk: &wc, Replay: &isReplay}); err != nil {
			return err
		}
		sent.Inc()
		last = it.Cursor
		if replaying && it.Cursor.Compare(upTo) >= 0 {
			if err := complete(); err != nil {
				return err
			}
		}
		if it.Chunk.Terminal() {
			return s.write(ctx, wsOut{Type: "done", RequestID: t.RequestID, Status: it.Chunk.EndStatus()})
		}
	}
	return nil
}
