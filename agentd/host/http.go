package host

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/forever-agents/forever/agentd"
	"github.com/forever-agents/forever/agents"
	"github.com/forever-agents/forever/internal/apierror"
	"github.com/forever-agents/forever/replay"
)

// StateSource reads an agent's current state for the first message of its
// events stream; chathost's reads a chat agent's (version 0 and no value
// for an agent that never set one).
type StateSource interface {
	State(ctx context.Context, agent string) (value json.RawMessage, version int, err error)
}

// HTTPConfig configures AttachHTTP.
type HTTPConfig struct {
	// State reads the current state; nil: every stream starts with
	// version 0 and a null value.
	State StateSource
	// Heartbeat is how often an idle events stream sends an SSE comment,
	// so proxies keep it open. Default 15s.
	Heartbeat time.Duration
}

// AttachHTTP serves, on d's HTTP server (under --auth, each tenant's
// daemon's, behind the bearer-token front door):
//
//   - GET /v1/agents?user=&tag=&type=&cursor=&limit=: one page of the
//     listing (Host.List), {"agents": [...], "next": "..."};
//   - GET /v1/agents/{id}/events[?after=<cursor>]: the agent's broadcasts
//     and state changes as Server-Sent Events, each `id: <cursor>` and
//     `data: <message>`. Without a cursor: first the current state
//     ({"type":"state","version":N,"value":...}), then every message
//     published on <prefix>.bcast.<id> from then on, in order (a state
//     message not newer than the last one sent is skipped). With one (or
//     a Last-Event-ID header): every stored message after it, then on
//     live, each once (agentevents.go);
//   - GET /v1/agents/{id}/status, /fibers?ops=, /schedules and
//     /log?after=&limit=&type=: the verbs of the same names (attachReads).
//
// Browsers on other origins follow the gateway's rules (--cors-origin).
// Errors are {"code": N, "error": "..."}.
func AttachHTTP(d *agentd.Daemon, h *Host, cfg HTTPConfig) error {
	if cfg.Heartbeat <= 0 {
		cfg.Heartbeat = 15 * time.Second
	}
	s := &httpAgents{h: h, cfg: cfg, d: d}
	origins := d.Config().CORSOrigins
	d.Handle("GET /v1/agents", cors(origins, http.HandlerFunc(s.list)))
	d.Handle("OPTIONS /v1/agents", cors(origins, http.HandlerFunc(s.list)))
	d.Handle("GET /v1/agents/{id}/events", cors(origins, http.HandlerFunc(s.events)))
	d.Handle("OPTIONS /v1/agents/{id}/events", cors(origins, http.HandlerFunc(s.events)))
	s.attachReads(d, origins)
	return nil
}

// cors applies the gateway's cross-origin rules (replay.CORS) unless a
// handler in front did (a tenant's front door).
func cors(origins []string, next http.Handler) http.Handler {
	c := replay.CORS(origins, next)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if w.Header().Get("Access-Control-Allow-Origin") != "" {
			next.ServeHTTP(w, r)
			return
		}
		c.ServeHTTP(w, r)
	})
}

type httpAgents struct {
	h   *Host
	d   *agentd.Daemon
	cfg HTTPConfig
}

func (s *httpAgents) list(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodOptions {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	if s.h.deps == nil {
		writeError(w, ErrUnavailable.Wrapf("starting up"))
		return
	}
	if err := s.h.quotas.Allow(); err != nil {
		writeError(w, err)
		return
	}
	v := r.URL.Query()
	q := agents.Query{User: v.Get("user"), Tag: v.Get("tag"), Type: v.Get("type"), Version: v.Get("version"), Cursor: v.Get("cursor")}
	if l := v.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil {
			writeError(w, apierror.New(apierror.BadRequest, "the query parameter limit must be a number from 1 to %d, got %q", agents.MaxLimit, l))
			return
		}
		q.Limit = n
	}
	page, err := s.h.List(r.Context(), q)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, page)
}

// writeError answers err as {"code": N, "error": "..."} with its status
// code, and Retry-After for 429 and 503 (ClientError).
func writeError(w http.ResponseWriter, err error) { ClientError(err).WriteHTTP(w) }

func writeJSON(w http.ResponseWriter, code int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		writeError(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	w.Write(append(body, '\n'))
}
