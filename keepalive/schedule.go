package keepalive

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"

	"github.com/forever-agents/forever/eventlog"
	"github.com/robfig/cron/v3"
)

// Kind is how a schedule decides when it fires.
type Kind string

// Kinds of schedule. Delay and At fire once; Every and Cron recur.
const (
	KindDelay Kind = "delay" // once, Spec.Delay after it was scheduled
	KindAt    Kind = "at"    // once, at Spec.At
	KindEvery Kind = "every" // every Spec.Every, the first Spec.Every after it was scheduled
	KindCron  Kind = "cron"  // at each time matching Spec.Cron
)

// Recurring reports whether schedules of kind k fire more than once.
func (k Kind) Recurring() bool { return k == KindEvery || k == KindCron }

// Spec describes a schedule to create. Kind may be left empty: it is then
// the one of Delay, At, Every and Cron that is set (exactly one must be). Set
// Kind to KindDelay for a zero Delay (fire as soon as possible).
type Spec struct {
	// Kind, when set, selects the field that is read; the others must be zero.
	Kind Kind
	// ID names the schedule; empty means a generated id. A valid subject
	// token. Scheduling an ID that exists replaces that schedule.
	ID string
	// Callback is the name the host routes the firing to. Required.
	Callback string
	// Payload is handed back to the callback; empty or valid JSON.
	Payload json.RawMessage

	// Delay fires once, Delay after now.
	Delay time.Duration
	// At fires once at At (at once when At is past).
	At time.Time
	// Every fires every Every, first at now+Every. Missed occurrences (after
	// downtime) fire once, then the schedule continues on its grid.
	Every time.Duration
	// Cron fires at each time matching the expression, evaluated in the
	// Scheduler's Location: standard 5 fields (minute hour day-of-month month
	// day-of-week), an optional leading seconds field (6 fields), or a
	// descriptor such as @hourly, @daily or @every 90s. A "CRON_TZ=Zone "
	// prefix overrides the location.
	Cron string
}

// Schedule is a stored schedule, a row of the schedules projection. The
// caller owns returned values.
type Schedule struct {
	ID       string          `json:"id"`
	Agent    string          `json:"agent"`
	Callback string          `json:"callback"`
	Payload  json.RawMessage `json:"payload,omitempty"`
	Kind     Kind            `json:"kind"`

	// The spec field of the kind (the others are zero).
	Delay time.Duration `json:"delay,omitempty"`
	At    time.Time     `json:"at,omitzero"`
	Every time.Duration `json:"every,omitempty"`
	Cron  string        `json:"cron,omitempty"`

	// NextAt is when it fires next: the due occurrence, or the retry time
	// of a failed attempt.
	NextAt    time.Time `json:"nextAt"`
	CreatedAt time.Time `json:"createdAt"`
	// Attempts is the number of failed attempts of the current occurrence;
	// zero unless a retry is pending.
	Attempts int `json:"attempts,omitempty"`
	// LastError is the error of the latest failed attempt, kept until the
	// occurrence succeeds.
	LastError string `json:"lastError,omitempty"`
}

// cronParser parses standard 5-field expressions, 6 fields with a leading
// seconds field, and descriptors (@daily, @every 1h).
var cronParser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// parseCron parses a cron expression with cronParser. robfig/cron v3.0.1
// panics on some malformed expressions ("CRON_TZ=" with nothing after it);
// such a panic is an error here, so neither Schedule nor a stored row can
// bring the scheduler down.
func parseCron(expr string) (sched cron.Schedule, err error) {
	defer func() {
		if r := recover(); r != nil {
			sched, err = nil, fmt.Errorf("malformed cron expression %q: %v", expr, r)
		}
	}()
	return cronParser.Parse(expr)
}

// build checks spec and returns the schedule it describes, due from now.
func build(agent string, spec Spec, now time.Time, loc *time.Location) (Schedule, error) {
	if !eventlog.ValidToken(agent) {
		return Schedule{}, invalidf("agent id %q is not a valid subject token", agent)
	}
	if spec.ID != "" && !eventlog.ValidToken(spec.ID) {
		return Schedule{}, invalidf("schedule id %q is not a valid subject token", spec.ID)
	}
	if spec.Callback == "" {
		return Schedule{}, invalidf("schedule for %q has no callback", agent)
	}
	payload, err := compactJSON(spec.Payload)
	if err != nil {
		return Schedule{}, invalidf("schedule %q payload is not valid JSON: %v", spec.Callback, err)
	}
	now = now.UTC()
	s := Schedule{ID: spec.ID, Agent: agent, Callback: spec.Callback, Payload: payload, CreatedAt: now}
	kind, err := spec.kind()
	if err != nil {
		return Schedule{}, err
	}
	s.Kind = kind
	switch kind {
	case KindDelay:
		if spec.Delay < 0 {
			return Schedule{}, invalidf("schedule %q: negative delay %s", spec.Callback, spec.Delay)
		}
		s.Delay, s.NextAt = spec.Delay, now.Add(spec.Delay)
	case KindAt:
		if spec.At.IsZero() {
			return Schedule{}, invalidf("schedule %q: kind at without a time", spec.Callback)
		}
		s.At, s.NextAt = spec.At.UTC(), spec.At.UTC()
	case KindEvery:
		if spec.Every <= 0 {
			return Schedule{}, invalidf("schedule %q: interval %s must be positive", spec.Callback, spec.Every)
		}
		s.Every, s.NextAt = spec.Every, now.Add(spec.Every)
	case KindCron:
		sched, err := parseCron(spec.Cron)
		if err != nil {
			return Schedule{}, invalidf("schedule %q: cron %q: %v", spec.Callback, spec.Cron, err)
		}
		next := sched.Next(now.In(loc))
		if next.IsZero() {
			return Schedule{}, invalidf("schedule %q: cron %q never fires", spec.Callback, spec.Cron)
		}
		s.Cron, s.NextAt = spec.Cron, next.UTC()
	}
	return s, nil
}

// kind returns the kind spec selects.
func (spec *Spec) kind() (Kind, error) {
	var set []Kind
	if spec.Delay != 0 {
		set = append(set, KindDelay)
	}
	if !spec.At.IsZero() {
		set = append(set, KindAt)
	}
	if spec.Every != 0 {
		set = append(set, KindEvery)
	}
	if spec.Cron != "" {
		set = append(set, KindCron)
	}
	switch {
	case spec.Kind == "" && len(set) == 1:
		return set[0], nil
	case spec.Kind == "":
		return "", invalidf("schedule %q: want exactly one of Delay, At, Every, Cron; have %v", spec.Callback, set)
	}
	switch spec.Kind {
	case KindDelay, KindAt, KindEvery, KindCron:
	default:
		return "", invalidf("schedule %q: unknown kind %q", spec.Callback, spec.Kind)
	}
	if len(set) > 1 || (len(set) == 1 && set[0] != spec.Kind) {
		return "", invalidf("schedule %q: kind %s with fields of %v", spec.Callback, spec.Kind, set)
	}
	return spec.Kind, nil
}

// next returns the occurrence of a recurring schedule after the one due at
// s.NextAt, skipping those already past at now; zero for one-shot kinds.
func (s *Schedule) next(now time.Time, loc *time.Location) time.Time {
	switch s.Kind {
	case KindEvery:
		if s.Every <= 0 {
			// Validated when set; a stored row with no interval (a forged
			// or damaged schedule.set) ends instead of dividing by zero.
			return time.Time{}
		}
		if !now.Before(s.NextAt) {
			n := now.Sub(s.NextAt)/s.Every + 1
			return s.NextAt.Add(n * s.Every).UTC()
		}
		return s.NextAt.Add(s.Every).UTC()
	case KindCron:
		sched, err := parseCron(s.Cron)
		if err != nil {
			return time.Time{} // validated when set; treat as finished
		}
		after := now
		if s.NextAt.After(after) {
			after = s.NextAt
		}
		return sched.Next(after.In(loc)).UTC()
	}
	return time.Time{}
}

// sameRecurring reports whether a and b are the same recurring schedule for
// deduplication: agent, callback, payload and spec (interval or cron
// expression) equal.
func sameRecurring(a, b Schedule) bool {
	return a.Kind.Recurring() && a.Kind == b.Kind && a.Agent == b.Agent && a.Callback == b.Callback &&
		bytes.Equal(a.Payload, b.Payload) && a.Every == b.Every && a.Cron == b.Cron
}

func compactJSON(b json.RawMessage) (json.RawMessage, error) {
	if len(b) == 0 {
		return nil, nil
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, b); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
