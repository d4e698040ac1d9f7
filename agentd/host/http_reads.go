package host

import (
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/nats-io/nuid"

	"github.com/forever-agents/forever/agentd"
	"github.com/forever-agents/forever/internal/apierror"
)

// attachReads serves the reads of one agent over HTTP, each the host verb
// of the same name (so NATS clients have them too):
//
//   - GET /v1/agents/{id}/status: Status (the listing's entry included);
//   - GET /v1/agents/{id}/fibers?ops=true: []FiberInfo, with each fiber's
//     steps when ops is true;
//   - GET /v1/agents/{id}/schedules: []keepalive.Schedule;
//   - GET /v1/agents/{id}/log?after=&limit=&type=: LogPage;
//   - GET /v1/agents/{id}/approvals, /tools, /usage and /streams?cursor=&limit=&stream=:
//     the verbs of a type that has them (chathost's chat agents), 404 for
//     the others.
func (s *httpAgents) attachReads(d *agentd.Daemon, origins []string) {
	reads := map[string]func(*http.Request) (any, error){
		"status":    func(*http.Request) (any, error) { return nil, nil },
		"schedules": func(*http.Request) (any, error) { return nil, nil },
		"fibers": func(r *http.Request) (any, error) {
			ops, err := queryBool(r, "ops")
			return FibersRequest{Ops: ops}, err
		},
		"approvals": func(*http.Request) (any, error) { return nil, nil },
		"tools":     func(*http.Request) (any, error) { return nil, nil },
		"usage":     func(*http.Request) (any, error) { return nil, nil },
		"streams": func(r *http.Request) (any, error) {
			limit, err := queryInt(r, "limit", maxPageLimit)
			return struct {
				Cursor string `json:"cursor,omitempty"`
				Limit  int    `json:"limit,omitempty"`
				Stream string `json:"stream,omitempty"`
			}{r.URL.Query().Get("cursor"), limit, r.URL.Query().Get("stream")}, err
		},
		"log": func(r *http.Request) (any, error) {
			v := r.URL.Query()
			req := LogRequest{After: v.Get("after"), Type: v.Get("type")}
			var err error
			req.Limit, err = queryInt(r, "limit", MaxLogLimit)
			return req, err
		},
	}
	for verb, payload := range reads {
		h := cors(origins, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodOptions {
				w.WriteHeader(http.StatusNoContent)
				return
			}
			p, err := payload(r)
			if err != nil {
				writeError(w, err)
				return
			}
			ServeCommand(w, r, s.h, verb, p)
		}))
		d.Handle("GET /v1/agents/{id}/"+verb, h)
		d.Handle("OPTIONS /v1/agents/{id}/"+verb, h)
	}
}

// maxPageLimit bounds the limit of a page read over HTTP here; the verb
// checks its own, lower, maximum.
const maxPageLimit = 10000

// ServeCommand answers an HTTP request with the command verb of the agent
// named by the path's {id}, payload encoded as its data (nil: none): 200
// with the reply as JSON, or the error as {"code","error"}. The request's
// identity (the tenants' front door) is checked against the verb, as for
// a NATS command; its Idempotency-Key header is the command's request id.
// The tenants' front door took the request from the rate quota already.
func ServeCommand(w http.ResponseWriter, r *http.Request, h *Host, verb string, payload any) {
	if h.deps == nil {
		writeError(w, ErrUnavailable.Wrapf("starting up"))
		return
	}
	var data json.RawMessage
	if payload != nil {
		b, err := json.Marshal(payload)
		if err != nil {
			writeError(w, err)
			return
		}
		data = b
	}
	id := r.Header.Get(HeaderIdempotencyKey)
	if id == "" {
		id = nuid.Next()
	}
	out, err := h.Command(r.Context(), Command{Agent: r.PathValue("id"), Verb: verb, Data: data, RequestID: id})
	if err != nil {
		if StatusCode(err) == http.StatusInternalServerError {
			h.logger.Error("command failed", "agent", r.PathValue("id"), "verb", verb, "err", err)
		}
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// queryBool reads an optional boolean query parameter ("true", "1",
// "false", "0"; absent: false).
func queryBool(r *http.Request, name string) (bool, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, apierror.New(apierror.BadRequest, "the query parameter %s must be true or false, got %q", name, v)
	}
	return b, nil
}

// queryInt reads an optional positive integer query parameter up to max
// (absent: 0).
func queryInt(r *http.Request, name string, max int) (int, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > max {
		return 0, apierror.New(apierror.BadRequest, "the query parameter %s must be a number from 1 to %d, got %q", name, max, v)
	}
	return n, nil
}
