package replay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"path"
	"strconv"
	"sync"
	"time"

	"github.com/forever-agents/forever/chat/chunk"
	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/internal/apierror"
	"github.com/prometheus/client_golang/prometheus"
)

// Chats is what the gateway needs from the chat agents: the lead's host
// implements it. The agent id is the AI SDK chat id. Errors carry their HTTP
// status through a StatusCode() int method or a known sentinel (see
// StatusCode); anything else is 500.
type Chats interface {
	// Send starts a turn from an AI SDK request body as the gateway
	// passes it on: {id, messages: [the last one], history, ...} (readBody:
	// the earlier messages summed up as History); it returns after the
	// user message is durable.
	Send(ctx context.Context, agent string, body json.RawMessage) (Turn, error)
	// Stop stops the agent's running turn; stopped is false when none ran.
	Stop(ctx context.Context, agent string) (stopped bool, err error)
	// Messages returns a page of the conversation, encoded as JSON as it
	// is: {"messages":[...],"next":"<message id>"}. A zero q asks for the
	// whole conversation.
	Messages(ctx context.Context, agent string, q MessagesQuery) (any, error)
}

// MessagesQuery is a page of a conversation: the messages after the one
// with id After ("" for the first), at most Limit of them (0: the
// implementation's page). GET /v1/chat/{id}/messages?limit=N&after=<id>.
type MessagesQuery struct {
	After string
	Limit int
}

// MaxMessagesLimit is the largest limit a messages query takes.
const MaxMessagesLimit = 1000

// Turn identifies a turn started by Chats.Send.
type Turn struct {
	RequestID, StreamID, MessageID string
	// After is where the turn's chunks start, the stream's real start: the
	// agent's last chunk sequence when the turn was accepted (0 for an
	// agent without chunks), so its first chunk is the first one after it.
	// 0 also works (a follow filters by stream) but tells a client
	// nothing; the started frame and the chat reply show it.
	After Cursor
}

// ActiveTurns is an optional capability of a Chats: the agent's turn that
// started but may not have written a chunk yet. The gateway then offers it
// as pending over WebSocket and resumes it over SSE from its start.
type ActiveTurns interface {
	Active(ctx context.Context, agent string) (t Turn, ok bool, err error)
}

// StreamIndex reads the stream metadata projection. Both methods return an
// error wrapping chunk.ErrUnknownStream when there is no such stream. They
// take the request's ctx: an index may wait for the projection to catch up
// with the log (agentd's does) and must give up when the request ends.
// ProjectedIndex reads a *chunk.Streams as it is.
type StreamIndex interface {
	Latest(ctx context.Context, agent string) (chunk.StreamInfo, error)
	Get(ctx context.Context, agent, stream string) (chunk.StreamInfo, error)
}

// ProjectedIndex is the StreamIndex of a *chunk.Streams: it reads the
// projection as applied, without waiting for it.
type ProjectedIndex struct{ Streams *chunk.Streams }

var _ StreamIndex = ProjectedIndex{}

// Latest returns the agent's latest stream, or ctx's error once ctx is done.
func (p ProjectedIndex) Latest(ctx context.Context, agent string) (chunk.StreamInfo, error) {
	if err := ctx.Err(); err != nil {
		return chunk.StreamInfo{}, err
	}
	return p.Streams.Latest(agent)
}

// Get returns one stream, or ctx's error once ctx is done.
func (p ProjectedIndex) Get(ctx context.Context, agent, stream string) (chunk.StreamInfo, error) {
	if err := ctx.Err(); err != nil {
		return chunk.StreamInfo{}, err
	}
	return p.Streams.Get(agent, stream)
}

// DefaultMaxBodyBytes bounds, by default, what a POST /v1/chat body keeps:
// its last message and its other fields, not its earlier messages.
const DefaultMaxBodyBytes = 4 << 20

// pendingTTL bounds how long a turn started through the gateway counts as
// pending when it writes no chunk.
const pendingTTL = time.Minute

// GatewayConfig configures NewGateway. A zero field means "use the
// default".
// DefaultWriteTimeout is GatewayConfig.WriteTimeout's default.
const DefaultWriteTimeout = 10 * time.Second

type GatewayConfig struct {
	// Log is the event log the gateway replays chunks from. Required.
	Log *eventlog.Log
	// Chats starts, stops and lists turns. Required.
	Chats Chats
	// Streams is the stream metadata projection. Required.
	Streams StreamIndex
	// Blobs reads back the payloads chunks hold by reference (chunk.Blobs,
	// the FOREVER_BLOBS bucket), so SSE streams, GET replays and the
	// WebSocket send each chunk as it was written (WithBlobs). Nil: such a
	// chunk is sent with the field empty.
	Blobs chunk.Getter
	// Live, when set, is how the turns' writers publish their stored
	// chunks (chunk.Live): the gateway's follows take live chunks from it
	// instead of creating a JetStream consumer each (WithLive). Nil: a
	// consumer per follow of a running turn.
	Live *chunk.Live
	// Stopping, when closed, ends every long-lived response (SSE streams,
	// WebSockets): close it when the server shuts down. Turns go on.
	Stopping <-chan struct{}
	// MaxBodyBytes caps what a POST body keeps (its last message and
	// other fields; its earlier messages are not held) and a WebSocket
	// frame. Default DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// WriteTimeout bounds each write to a streaming client (an SSE event, a
	// WebSocket frame). A client that reads too slowly for it is
	// disconnected; it resumes from its last cursor (Last-Event-ID). It
	// never stalls a turn or another client: each reads the log at its own
	// pace. Default DefaultWriteTimeout.
	WriteTimeout time.Duration
	// AllowedOrigins are the browser origins, besides the gateway's own,
	// that may call it (CORS) and open its WebSocket: patterns such as
	// "https://app.example.com", "*.example.com" or "localhost:*" (see
	// originAllowed); "*" allows any. Empty: same-origin only, and a
	// request with another Origin gets 403.
	AllowedOrigins []string
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Registerer receives the gateway's metrics. Nil means not registered.
	Registerer prometheus.Registerer
}

// Validate checks the config after defaults are applied.
func (c *GatewayConfig) Validate() error {
	switch {
	case c.Log == nil:
		return fmt.Errorf("%w: Log is required", ErrInvalidConfig)
	case c.Chats == nil:
		return fmt.Errorf("%w: Chats is required", ErrInvalidConfig)
	case c.Streams == nil:
		return fmt.Errorf("%w: Streams is required", ErrInvalidConfig)
	case c.MaxBodyBytes < 0 || c.WriteTimeout < 0:
		return fmt.Errorf("%w: MaxBodyBytes and WriteTimeout must not be negative", ErrInvalidConfig)
	}
	for _, p := range c.AllowedOrigins {
		if _, err := path.Match(p, ""); err != nil || p == "" {
			return fmt.Errorf("%w: allowed origin %q is not a valid pattern", ErrInvalidConfig, p)
		}
	}
	return nil
}

func (c *GatewayConfig) ensureDefaults() {
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if c.WriteTimeout == 0 {
		c.WriteTimeout = DefaultWriteTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Gateway is the HTTP side of replay: the AI SDK chat endpoints (SSE), the
// WebSocket resume handshake and the chat page. It is an http.Handler, safe
// for concurrent use; see the package doc for the routes.
type Gateway struct {
	cfg     GatewayConfig
	client  *Client
	mux     *http.ServeMux
	logger  *slog.Logger
	metrics *metrics

	mu struct {
		sync.Mutex
		// started holds turns started through this gateway until their
		// stream shows in the index (pending turns), per agent.
		started map[string]startedTurn
	}
}

type startedTurn struct {
	turn Turn
	at   time.Time
}

// NewGateway returns the gateway. Mount it at the server's root: it serves
// /v1/chat... and the chat page at /.
func NewGateway(cfg GatewayConfig) (*Gateway, error) {
	cfg.ensureDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	g := &Gateway{
		cfg:     cfg,
		client:  newGatewayClient(cfg),
		mux:     http.NewServeMux(),
		logger:  cfg.Logger.With("subsystem", "replay"),
		metrics: m,
	}
	g.mu.started = map[string]startedTurn{}
	g.mux.HandleFunc("POST /v1/chat", g.postChat)
	g.mux.HandleFunc("GET /v1/chat/{id}/stream", g.getStream)
	g.mux.HandleFunc("POST /v1/chat/{id}/stop", g.postStop)
	g.mux.HandleFunc("GET /v1/chat/{id}/messages", g.getMessages)
	g.mux.HandleFunc("GET /v1/chat/{id}/ws", g.getWS)
	g.mux.HandleFunc("GET /{$}", g.getPage)
	g.mux.HandleFunc("/", g.notFound)
	return g, nil
}

// ServeHTTP implements http.Handler.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !g.cors(w, r) {
		return
	}
	g.mux.ServeHTTP(w, r)
}

// writeError answers err as {"code": N, "error": "..."} (see apiError),
// with Retry-After for 429 and 503. A 5xx is logged with its cause.
func (g *Gateway) writeError(w http.ResponseWriter, r *http.Request, err error) {
	e := apiError(err)
	if e.Code >= 500 {
		g.logger.Warn("request failed", "method", r.Method, "path", r.URL.Path, "code", e.Code, "err", err)
	}
	e.WriteHTTP(w)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		apierror.From(err).WriteHTTP(w)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	w.Write(append(body, '\n'))
}

// notFound answers a path or method the gateway does not serve: 404, as
// Stripe answers an unrecognized request URL.
func (g *Gateway) notFound(w http.ResponseWriter, r *http.Request) {
	apierror.New(apierror.NotFound, "no endpoint %s %q here: the gateway serves POST /v1/chat, GET /v1/chat/{id}/stream, POST /v1/chat/{id}/stop, GET /v1/chat/{id}/messages, GET /v1/chat/{id}/ws and the chat page at GET /", echo(r.Method), echo(r.URL.Path)).WriteHTTP(w)
}

// agentOf returns the {id} path value, checked to be a usable agent id.
// messagesQuery reads ?limit=N&after=<message id>.
func messagesQuery(r *http.Request) (MessagesQuery, error) {
	var q MessagesQuery
	v := r.URL.Query()
	if s := v.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > MaxMessagesLimit {
			return q, badRequest("limit %q is not a whole number from 1 to %d", s, MaxMessagesLimit)
		}
		q.Limit = n
	}
	if s := v.Get("after"); s != "" {
		if !eventlog.ValidToken(s) {
			return q, badRequest("after %q is not a message id", s)
		}
		q.After = s
	}
	return q, nil
}

func agentOf(r *http.Request) (string, error) {
	id := r.PathValue("id")
	if !eventlog.ValidToken(id) {
		return "", badAgentID("chat id", id)
	}
	return id, nil
}

// lifetime returns a context for a long-lived response: done when the
// request's is, or when the gateway is stopping. Call cancel when done.
func (g *Gateway) lifetime(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	if g.cfg.Stopping == nil {
		return ctx, cancel
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		select {
		case <-g.cfg.Stopping:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, func() { cancel(); <-done }
}

// send starts a turn and remembers it as pending until its stream shows.
func (g *Gateway) send(ctx context.Context, agent string, body json.RawMessage) (Turn, error) {
	t, err := g.cfg.Chats.Send(ctx, agent, body)
	if err != nil {
		return Turn{}, err
	}
	g.mu.Lock()
	g.mu.started[agent] = startedTurn{turn: t, at: time.Now()}
	g.mu.Unlock()
	return t, nil
}

// offer is what a resume finds for an agent.
type offer struct {
	kind string // "none", "pending" or "resuming"
	turn Turn   // RequestID, StreamID, MessageID; After is where replay starts
	// ended is the status of the latest stream when it has ended ("none").
	ended string
	// info is the latest stream's metadata (zero for none and pending).
	info chunk.StreamInfo
}

// active finds the agent's turn to resume: a pending one (started, no chunk
// indexed yet), the latest stream if it has not ended, or none.
func (g *Gateway) active(ctx context.Context, agent string) (offer, error) {
	g.mu.Lock()
	st, ok := g.mu.started[agent]
	if ok && time.Since(st.at) > pendingTTL {
		delete(g.mu.started, agent)
		ok = false
	}
	g.mu.Unlock()
	if ok {
		_, err := g.cfg.Streams.Get(ctx, agent, st.turn.StreamID)
		switch {
		case errors.Is(err, chunk.ErrUnknownStream):
			return offer{kind: "pending", turn: st.turn}, nil
		case err != nil:
			return offer{}, err
		}
		g.mu.Lock()
		if cur, ok := g.mu.started[agent]; ok && cur.turn.RequestID == st.turn.RequestID {
			delete(g.mu.started, agent)
		}
		g.mu.Unlock()
	}
	if at, ok := g.cfg.Chats.(ActiveTurns); ok {
		t, ok, err := at.Active(ctx, agent)
		if err != nil {
			return offer{}, err
		}
		if ok {
			if _, err := g.cfg.Streams.Get(ctx, agent, t.StreamID); errors.Is(err, chunk.ErrUnknownStream) {
				return offer{kind: "pending", turn: t}, nil
			}
		}
	}
	info, err := g.cfg.Streams.Latest(ctx, agent)
	if errors.Is(err, chunk.ErrUnknownStream) {
		return offer{kind: "none"}, nil
	}
	if err != nil {
		return offer{}, err
	}
	var after Cursor
	if info.FirstSeq > 0 {
		after = CursorAt(info.FirstSeq - 1)
	}
	if info.Done() {
		return offer{kind: "none", ended: info.Status, info: info, turn: Turn{RequestID: info.RequestID, StreamID: info.Stream, MessageID: info.MessageID, After: after}}, nil
	}
	return offer{kind: "resuming", info: info, turn: Turn{RequestID: info.RequestID, StreamID: info.Stream, MessageID: info.MessageID, After: after}}, nil
}

// stored checks that a resume of info's stream after the cursor can be
// served: it returns a 410 *apierror.Error wrapping chunk.ErrExpired when
// retention marked the stream expired, or removed its first chunks (the
// view's FirstSeq is older than the first chunk still stored) and the
// cursor is before the first chunk still stored, so chunks the resume
// needs may be gone. Chunks are removed oldest first, so a cursor at or past the first
// stored chunk still gets every chunk after it.
func (g *Gateway) stored(ctx context.Context, info chunk.StreamInfo, after Cursor) error {
	if info.Expired {
		return expiredFor(info.Agent, fmt.Errorf("%w: stream %s/%s expired at %s", chunk.ErrExpired, info.Agent, info.Stream, info.ExpiredAt.Format(time.RFC3339)))
	}
	if info.FirstSeq == 0 {
		return nil
	}
	f := eventlog.Filter{Agent: info.Agent, Stream: info.Stream}
	first, found, err := g.cfg.Log.Next(ctx, f, 0)
	if err != nil && !found {
		return fmt.Errorf("replay: first chunk of %s/%s: %w", info.Agent, info.Stream, err)
	}
	if !found {
		// A direct get may be answered by a replica that lags behind the
		// view: the stream is gone only if the leader holds nothing either.
		last, err := g.cfg.Log.LastSeq(ctx, f)
		if err != nil {
			return fmt.Errorf("replay: last chunk of %s/%s: %w", info.Agent, info.Stream, err)
		}
		if last != 0 {
			return nil
		}
	}
	switch {
	case found && first.Type == chunk.EventExpired:
		return expiredFor(info.Agent, fmt.Errorf("%w: stream %s/%s expired", chunk.ErrExpired, info.Agent, info.Stream))
	case found && first.Seq <= info.FirstSeq:
		return nil
	case !found || after.Seq() < first.Seq:
		return expiredFor(info.Agent, fmt.Errorf("%w: stream %s/%s began at %d, its first stored chunk is at %d (0: none)", chunk.ErrExpired, info.Agent, info.Stream, info.FirstSeq, first.Seq))
	}
	return nil
}

func (g *Gateway) postStop(w http.ResponseWriter, r *http.Request) {
	agent, err := agentOf(r)
	if err != nil {
		g.writeError(w, r, err)
		return
	}
	stopped, err := g.cfg.Chats.Stop(r.Context(), agent)
	if err != nil {
		g.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]bool{"stopped": stopped})
}

func (g *Gateway) getMessages(w http.ResponseWriter, r *http.Request) {
	agent, err := agentOf(r)
	if err != nil {
		g.writeError(w, r, err)
		return
	}
	q, err := messagesQuery(r)
	if err != nil {
		g.writeError(w, r, err)
		return
	}
	msgs, err := g.cfg.Chats.Messages(r.Context(), agent, q)
	if err != nil {
		g.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, msgs)
}

// newGatewayClient is the gateway's Client: WithBlobs, and WithLive when
// the config has a Live.
func newGatewayClient(cfg GatewayConfig) *Client {
	opts := []ClientOption{WithBlobs(cfg.Blobs)}
	if cfg.Live != nil {
		opts = append(opts, WithLive(cfg.Live, cfg.Registerer))
	}
	return NewClient(cfg.Log, opts...)
}
