package agents

import (
	"bytes"
	"cmp"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/internal/apierror"
)

// Page sizes of a listing.
const (
	DefaultLimit = 100
	MaxLimit     = 1000
)

// ErrBadCursor is returned by List for a cursor it did not make.
var ErrBadCursor error = apierror.Declare("agents", apierror.BadRequest, "bad cursor")

// Entry is one agent of a listing, and the reply of the meta verb.
type Entry struct {
	Agent string `json:"agent"`
	Type  string `json:"type"`
	// Status is StatusRunning, StatusWaiting, StatusFailed or StatusIdle.
	Status   string          `json:"status"`
	User     string          `json:"user"`
	Tags     []string        `json:"tags"`
	Metadata json.RawMessage `json:"metadata"`
	// CreatedAt is the time of the agent's first event; LastActivity of
	// its latest.
	CreatedAt    time.Time `json:"createdAt"`
	LastActivity time.Time `json:"lastActivity"`
	// Children are the agent's sub-agents (chat's agent tools), the one
	// called last at the end, at most MaxChildren.
	Children []Child `json:"children"`
}

// Child is one sub-agent of an agent: the child agent, its type, the mode
// of its last call (chat.ModeEphemeral or chat.ModePersistent) and that
// call's link status (chat.LinkRunning, LinkCompleted, LinkFailed,
// LinkInterrupted or LinkCancelled).
type Child struct {
	Agent  string `json:"agent"`
	Type   string `json:"type"`
	Mode   string `json:"mode,omitempty"`
	Status string `json:"status"`
}

// Page is one page of a listing: the reply of forever.list and of GET
// /v1/agents. Next is the cursor of the next page, "" after the last.
type Page struct {
	Agents []Entry `json:"agents"`
	Next   string  `json:"next"`
}

// Query selects and pages a listing. Empty fields select everything.
type Query struct {
	User string `json:"user,omitempty"`
	Tag  string `json:"tag,omitempty"`
	Type string `json:"type,omitempty"`
	// Version selects the agents with work (a fiber, such as a chat
	// turn, running or left for recovery) started by that version of
	// their type's code; the host answers it from the runs view by
	// setting Only. An operator reads it to know when an old version has
	// drained.
	Version string `json:"version,omitempty"`
	// Only, when not nil, keeps only these agents (the host sets it for
	// Version). Never sent.
	Only map[string]bool `json:"-"`
	// Keep, when not nil, keeps only the agents it returns true for (the
	// host of a node that projects its own partitions sets it to them).
	// Never sent.
	Keep func(agent string) bool `json:"-"`
	// Cursor is a Page's Next: the page after it.
	Cursor string `json:"cursor,omitempty"`
	// Limit is the most agents of the page: DefaultLimit when 0, at most
	// MaxLimit.
	Limit int `json:"limit,omitempty"`
}

// Types tells an agent's type from its id, as the host does: an id is of
// registered type T when it is T or starts with "T:", else of Default.
type Types struct {
	Registered []string
	Default    string
}

// Of returns the type of agent, "" when no type claims it.
func (ts Types) Of(agent string) string {
	name, _, _ := strings.Cut(agent, ":")
	if slices.Contains(ts.Registered, name) {
		return name
	}
	return ts.Default
}

// claimedBy returns the registered type whose block of ids "T:..." agent
// is in and that is not want, "" otherwise.
func (ts Types) claimedBy(agent, want string) string {
	name, _, colon := strings.Cut(agent, ":")
	if colon && name != want && slices.Contains(ts.Registered, name) {
		return name
	}
	return ""
}

// EncodeCursor is the cursor of the page after agent.
func EncodeCursor(agent string) string { return base64.RawURLEncoding.EncodeToString([]byte(agent)) }

// DecodeCursor returns the agent a cursor names. Errors wrap ErrBadCursor.
func DecodeCursor(c string) (string, error) {
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil || !eventlog.ValidToken(string(b)) {
		return "", fmt.Errorf("%w: %q is not a cursor of a listing", ErrBadCursor, c)
	}
	return string(b), nil
}

// View reads the view of every agent.
type View struct{ v *eventlog.View }

// NewView reads the projection through v (lg.View(ProjectionName)).
func NewView(v *eventlog.View) *View { return &View{v: v} }

// Get returns agent's entry, and false when the view has no row of it.
func (v *View) Get(agent string, types Types) (Entry, bool, error) {
	raw, err := v.v.Get(rowKey(agent))
	if errors.Is(err, eventlog.ErrNotFound) {
		return Entry{}, false, nil
	}
	if err != nil {
		return Entry{}, false, err
	}
	var rw row
	if err := json.Unmarshal(raw, &rw); err != nil {
		return Entry{}, false, &eventlog.CorruptError{What: "agents row of " + agent, Err: err}
	}
	return rw.entry(agent, types), true, nil
}

// UserAgents returns the agents whose user is user, in id order (the
// user index); none for an empty user.
func (v *View) UserAgents(user string) ([]string, error) {
	if user == "" {
		return nil, nil
	}
	prefix := userKey(user, "")
	var out []string
	for kv, err := range v.v.Scan(prefix) {
		if err != nil {
			return nil, err
		}
		out = append(out, string(kv.Key[len(prefix):]))
	}
	return out, nil
}

// MetaSet reports whether agent's user context was set (an Initial patch
// would change nothing).
func (v *View) MetaSet(agent string) (bool, error) {
	raw, err := v.v.Get(rowKey(agent))
	if errors.Is(err, eventlog.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	var rw row
	if err := json.Unmarshal(raw, &rw); err != nil {
		return false, &eventlog.CorruptError{What: "agents row of " + agent, Err: err}
	}
	return rw.MetaSet, nil
}

func (rw *row) entry(agent string, types Types) Entry {
	e := Entry{
		Agent: agent, Type: types.Of(agent), Status: rw.status(),
		User: rw.User, Tags: rw.Tags, Metadata: rw.Metadata,
		CreatedAt: rw.Created, LastActivity: rw.Last, Children: []Child{},
	}
	for _, c := range rw.Children {
		// The link names the type when its tool does; else the host's
		// rule of ids does.
		c.Type = cmp.Or(c.Type, types.Of(c.Agent))
		e.Children = append(e.Children, c)
	}
	if e.Tags == nil {
		e.Tags = []string{}
	}
	if len(e.Metadata) == 0 || isNull(e.Metadata) {
		e.Metadata = json.RawMessage("{}")
	}
	return e
}

// List returns one page of the agents q selects, in agent id order,
// reading the view only: with q.User the user index, else with q.Tag the
// tag index, else the agents' rows, where a q.Type skips the blocks of ids
// other types claim. The other filters are checked on each row. A page
// resumes after its cursor without reading the rows before it.
//
// Errors: ErrBadCursor, ErrInvalid for a filter no agent can have (a
// limit below 0 or above MaxLimit), or a view read error.
func (v *View) List(q Query, types Types) (Page, error) {
	limit := q.Limit
	switch {
	case limit == 0:
		limit = DefaultLimit
	case limit < 0 || limit > MaxLimit:
		return Page{}, fmt.Errorf("%w: limit %d, want 1 to %d", ErrInvalid, limit, MaxLimit)
	}
	after := ""
	if q.Cursor != "" {
		var err error
		if after, err = DecodeCursor(q.Cursor); err != nil {
			return Page{}, err
		}
	}
	page := Page{Agents: []Entry{}}
	var prefix []byte
	index := true
	switch {
	case q.User != "":
		prefix = []byte("u/" + q.User + "\x00")
	case q.Tag != "":
		prefix = []byte("t/" + q.Tag + "\x00")
	default:
		prefix, index = []byte("a/"), false
		if q.Type != "" && q.Type != types.Default {
			prefix = []byte("a/" + q.Type) // ids "T" and "T:..."; others are filtered
		}
	}
	from := prefix
	if after != "" {
		// The smallest key after the cursor's agent.
		from = append(bytes.Clone(prefix), after+"\x00"...)
		if !index {
			from = []byte("a/" + after + "\x00")
		}
	}
	more := false
scan:
	for {
		seek := []byte(nil)
		for kv, err := range v.v.ScanFrom(prefix, from) {
			if err != nil {
				return Page{}, err
			}
			agent := string(kv.Key[len(prefix):])
			raw := kv.Value
			if index {
				if raw, err = v.v.Get(rowKey(agent)); errors.Is(err, eventlog.ErrNotFound) {
					continue
				} else if err != nil {
					return Page{}, err
				}
			} else {
				agent = string(kv.Key[2:])
				if q.Type != "" {
					if t := types.claimedBy(agent, q.Type); t != "" {
						seek = []byte("a/" + t + ";") // past the ids "t:..."
						break
					}
				}
			}
			var rw row
			if err := json.Unmarshal(raw, &rw); err != nil {
				return Page{}, &eventlog.CorruptError{What: "agents row of " + agent, Err: err}
			}
			if !q.matches(&rw, agent, types) {
				continue
			}
			if len(page.Agents) == limit {
				more = true
				break scan
			}
			page.Agents = append(page.Agents, rw.entry(agent, types))
		}
		if seek == nil {
			break
		}
		from = seek
	}
	if more {
		page.Next = EncodeCursor(page.Agents[len(page.Agents)-1].Agent)
	}
	return page, nil
}

// matches reports whether the agent passes every filter of q.
func (q Query) matches(rw *row, agent string, types Types) bool {
	switch {
	case q.User != "" && rw.User != q.User:
		return false
	case q.Tag != "" && !slices.Contains(rw.Tags, q.Tag):
		return false
	case q.Type != "" && types.Of(agent) != q.Type:
		return false
	case q.Only != nil && !q.Only[agent]:
		return false
	case q.Keep != nil && !q.Keep(agent):
		return false
	}
	return true
}
