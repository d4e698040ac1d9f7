package agentd

import (
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Denial is a client the embedded NATS server refused: a permissions
// violation, a failed or revoked authentication, an account or connection
// limit. Daemon.OnNATSDenial receives each one.
type Denial struct {
	// Kind is "publish", "subscribe", "auth", "connections",
	// "subscriptions" or "payload".
	Kind string
	// Account and User are the public keys of the client's account and
	// user, when the server's line names them.
	Account, User string
	// From is the client's host:port.
	From string
	// Detail is the server's log line.
	Detail string
	// Time is when the server logged it.
	Time time.Time
}

// denialLogEvery is the least time between two log lines of one kind of
// denial; the ones in between are counted and reported in the next line.
const denialLogEvery = time.Second

// denialKinds maps what the server's log line says to the denial's kind.
var denialKinds = []struct{ marker, kind string }{
	{"Publish Violation", "publish"},
	{"Subscription Violation", "subscribe"},
	{"authentication error", "auth"},
	{"Authorization Violation", "auth"},
	{"maximum account active connections exceeded", "connections"},
	{"maximum connections exceeded", "connections"},
	{"maximum subscriptions exceeded", "subscriptions"},
	{"maximum payload exceeded", "payload"},
}

var (
	// The server names a client `"<account>[/<account name>]/jwt:<user>"`.
	denialWho  = regexp.MustCompile(`"(A[A-Z2-7]{55})(?:/[^/"]*)?/(?:jwt|nkey):(U[A-Z2-7]{55})"`)
	denialFrom = regexp.MustCompile(`^(\S+:\d+) - [a-z]+:\d+`)
)

// denialLog counts the embedded server's denials and logs them at a
// bounded rate: a client that makes 20,000 forbidden publishes in 2 s
// costs a few log lines, not 20,000.
type denialLog struct {
	count *prometheus.CounterVec
	hook  atomic.Pointer[func(Denial)]
	// now is the clock of the denials' times and of the rate of their
	// log lines: time.Now, a test's own in tests.
	now func() time.Time

	mu struct {
		sync.Mutex
		last       map[string]time.Time
		suppressed map[string]int
	}
}

func newDenialLog(reg prometheus.Registerer) (*denialLog, error) {
	dl := &denialLog{count: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "forever_nats_denials_total",
		Help: "Clients the embedded NATS server refused, by kind: publish, subscribe (permissions), auth, connections, subscriptions, payload (limits).",
	}, []string{"kind"}), now: time.Now}
	dl.mu.last = make(map[string]time.Time)
	dl.mu.suppressed = make(map[string]int)
	if err := reg.Register(dl.count); err != nil {
		return nil, fmt.Errorf("%w: register metrics: %w", ErrConfig, err)
	}
	return dl, nil
}

// OnNATSDenial makes fn receive every denial of the embedded server (none
// with --nats-url). fn runs on the server's goroutines: it must not block.
// Call it before Run.
func (d *Daemon) OnNATSDenial(fn func(Denial)) {
	if d.denials != nil {
		d.denials.hook.Store(&fn)
	}
}

// denial classifies a server log line, seen at now; ok is false for
// other lines.
func parseDenial(line string, now time.Time) (Denial, bool) {
	for _, k := range denialKinds {
		if strings.Contains(line, k.marker) {
			dn := Denial{Kind: k.kind, Detail: line, Time: now}
			if m := denialWho.FindStringSubmatch(line); m != nil {
				dn.Account, dn.User = m[1], m[2]
			}
			if m := denialFrom.FindStringSubmatch(line); m != nil {
				dn.From = m[1]
			}
			return dn, true
		}
	}
	return Denial{}, false
}

// take handles line if it is a denial: it counts it, passes it to the
// hook and logs it unless one of its kind was logged within
// denialLogEvery. It reports whether line was a denial.
func (dl *denialLog) take(l *slog.Logger, line string) bool {
	if dl == nil {
		return false
	}
	dn, ok := parseDenial(line, dl.now())
	if !ok {
		return false
	}
	dl.count.WithLabelValues(dn.Kind).Inc()
	if fn := dl.hook.Load(); fn != nil {
		(*fn)(dn)
	}
	dl.mu.Lock()
	if dn.Time.Sub(dl.mu.last[dn.Kind]) < denialLogEvery {
		dl.mu.suppressed[dn.Kind]++
		dl.mu.Unlock()
		return true
	}
	dl.mu.last[dn.Kind] = dn.Time
	suppressed := dl.mu.suppressed[dn.Kind]
	dl.mu.suppressed[dn.Kind] = 0
	dl.mu.Unlock()
	l.Warn("nats refused a client", "kind", dn.Kind, "detail", line, "more_since_last", suppressed)
	return true
}
