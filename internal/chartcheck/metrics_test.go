package chartcheck_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// pending lists what the PrometheusRule and the dashboard query that agentd
// does not export yet, each with what it must mean; the lead adds them to
// agentd. A key is a metric name, or name{label="value"} for a series of a
// labelled metric that must exist before its first event (increase() and
// rate() miss the first event of a series that starts at 1).
// TestObservabilityMetrics skips these and fails when one appears on
// /metrics, so that it leaves this list: the list only shrinks.
var pending = map[string]string{}

// nonAgentd are names the queries use that Prometheus makes, not agentd.
var nonAgentd = []string{"up"}

// targetLabels are labels Prometheus adds when it scrapes, not agentd.
var targetLabels = []string{"namespace", "job", "pod", "instance", "service", "endpoint", "container"}

// TestObservabilityMetrics renders the PrometheusRule and the Grafana
// dashboard, runs agentd as the chart does (auth on) with a tenant that has
// quotas, chats once with a tool call, and checks every metric the rules
// and panels query against its /metrics.
func TestObservabilityMetrics(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs agentd")
	}
	helm := helmBinary(t)
	m := render(t, helm, "auth.generateSecret=true",
		"metrics.prometheusRule.enabled=true", "metrics.dashboard.enabled=true")
	queries := ruleQueries(t, m)
	dash := dashboardQueries(t, m)
	if len(queries) == 0 || len(dash) == 0 {
		t.Fatalf("%d rule and %d dashboard queries", len(queries), len(dash))
	}
	queries = append(queries, dash...)
	used := usedSeries(queries)

	exported := scrapeAgentd(t, func(s *scrape) bool {
		// Enough: every series a rule or panel uses that is not pending
		// shows. A turn's counters are not all set at once (the tokens
		// come with its usage, after turns_total): a scrape between them
		// failed this test once. At the deadline the last scrape is
		// checked, and what is missing named.
		for key := range used {
			if _, isPending := pending[key]; !isPending && !s.hasKey(key) {
				return false
			}
		}
		return true
	})
	for _, key := range slices.Sorted(maps.Keys(used)) {
		_, isPending := pending[key]
		switch ok := exported.hasKey(key); {
		case ok && isPending:
			t.Errorf("%s is on agentd's /metrics now: remove it from pending", key)
		case !ok && !isPending:
			t.Errorf("%s, used by %s, is not on agentd's /metrics (renamed? or add it to pending with its meaning)", key, used[key])
		}
	}
	for key := range pending {
		if _, ok := used[key]; !ok {
			t.Errorf("pending lists %s, which no rule or panel uses: remove it", key)
		}
	}
}

// ruleQueries returns the exprs of the rendered PrometheusRule, each
// prefixed "alert <name>: ".
func ruleQueries(t *testing.T, m manifests) []string {
	t.Helper()
	var rule struct {
		Spec struct {
			Groups []struct {
				Rules []struct {
					Alert, Record, Expr string
					For                 string
				}
			}
		}
	}
	m.one(t, "PrometheusRule", &rule)
	var out []string
	for _, g := range rule.Spec.Groups {
		for _, r := range g.Rules {
			if r.Expr == "" || r.Alert == "" {
				t.Errorf("rule %+v: want an alert with an expr", r)
			}
			out = append(out, "alert "+r.Alert+": "+r.Expr)
		}
	}
	return out
}

// dashboardQueries returns the queries of the dashboard in the rendered
// ConfigMap (panel targets and template variables), each prefixed with
// the panel's title.
func dashboardQueries(t *testing.T, m manifests) []string {
	t.Helper()
	var cm struct {
		Metadata struct{ Labels map[string]string }
		Data     map[string]string
	}
	m.one(t, "ConfigMap", &cm)
	if cm.Metadata.Labels["grafana_dashboard"] != "1" {
		t.Errorf("dashboard ConfigMap labels %v, want grafana_dashboard: \"1\" for Grafana's sidecar", cm.Metadata.Labels)
	}
	if len(cm.Data) != 1 {
		t.Fatalf("dashboard ConfigMap has %d keys, want 1", len(cm.Data))
	}
	var out []string
	for name, text := range cm.Data {
		var d dashboard
		if err := json.Unmarshal([]byte(text), &d); err != nil {
			t.Fatalf("dashboard %s: %v", name, err)
		}
		for _, v := range d.Templating.List {
			var q string
			if json.Unmarshal(v.Query, &q) != nil {
				var o struct{ Query string }
				json.Unmarshal(v.Query, &o)
				q = o.Query
			}
			if q != "" && v.Type == "query" {
				out = append(out, "variable "+v.Name+": "+q)
			}
		}
		var walk func([]panel)
		walk = func(ps []panel) {
			for _, p := range ps {
				for _, tg := range p.Targets {
					out = append(out, "panel "+p.Title+": "+tg.Expr)
				}
				walk(p.Panels)
			}
		}
		walk(d.Panels)
	}
	return out
}

type dashboard struct {
	Title      string
	UID        string
	Panels     []panel
	Templating struct {
		List []struct {
			Name, Type string
			Query      json.RawMessage
		}
	}
}

type panel struct {
	Title   string
	Type    string
	Targets []struct{ Expr string }
	Panels  []panel
}

var (
	// metricRef finds metric names in PromQL: agentd's own, the Go and
	// process collectors', and Prometheus's up.
	metricRef = regexp.MustCompile(`\b(?:forever|go|process)_[a-zA-Z0-9_]+\b|\bup\b`)
	// selectorRef finds a metric with its label matchers.
	selectorRef = regexp.MustCompile(`\b((?:forever|go|process)_[a-zA-Z0-9_]+)\{([^}]*)\}`)
	// labelEq finds label="value" matchers (not !=, =~ or !~).
	labelEq = regexp.MustCompile(`(?:^|[,{\s])([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"([^"]*)"`)
)

// usedSeries returns the metric names and name{label="value"} keys the
// queries use, each with the first query using it.
func usedSeries(queries []string) map[string]string {
	used := map[string]string{}
	add := func(key, q string) {
		if _, ok := used[key]; !ok {
			used[key] = q
		}
	}
	for _, q := range queries {
		where, expr, _ := strings.Cut(q, ": ")
		for _, name := range metricRef.FindAllString(expr, -1) {
			if !slices.Contains(nonAgentd, name) {
				add(name, where)
			}
		}
		for _, sel := range selectorRef.FindAllStringSubmatch(expr, -1) {
			for _, l := range labelEq.FindAllStringSubmatch(sel[2], -1) {
				if slices.Contains(targetLabels, l[1]) || strings.Contains(l[2], "$") || (l[1] == "tenant" && l[2] == "") {
					continue
				}
				add(fmt.Sprintf("%s{%s=%q}", sel[1], l[1], l[2]), where)
			}
		}
	}
	return used
}

// scrape is one /metrics page: metric families and their series' labels.
type scrape struct {
	types  map[string]string              // family name -> type
	series map[string][]map[string]string // sample name -> label sets
}

var (
	sampleLine = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s`)
	labelPair  = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"`)
)

func parseScrape(text string) *scrape {
	s := &scrape{types: map[string]string{}, series: map[string][]map[string]string{}}
	for line := range strings.Lines(text) {
		if rest, ok := strings.CutPrefix(line, "# TYPE "); ok {
			if f := strings.Fields(rest); len(f) == 2 {
				s.types[f[0]] = f[1]
			}
			continue
		}
		m := sampleLine.FindStringSubmatch(line)
		if m == nil || strings.HasPrefix(line, "#") {
			continue
		}
		labels := map[string]string{}
		for _, p := range labelPair.FindAllStringSubmatch(m[2], -1) {
			labels[p[1]] = p[2]
		}
		s.series[m[1]] = append(s.series[m[1]], labels)
	}
	return s
}

// has reports whether the page has the metric name: a family, or a sample
// name of one (a histogram's _bucket, _sum, _count).
func (s *scrape) has(name string) bool {
	_, fam := s.types[name]
	return fam || len(s.series[name]) > 0
}

// hasKey reports whether the page has name, or name{label="value"}.
func (s *scrape) hasKey(key string) bool {
	name, matcher, ok := strings.Cut(key, "{")
	if !ok {
		return s.has(name)
	}
	l, v, _ := strings.Cut(strings.TrimSuffix(matcher, "}"), "=")
	v = strings.Trim(v, `"`)
	for _, labels := range s.series[name] {
		if labels[l] == v {
			return true
		}
	}
	return false
}

// scrapeAgentd builds agentd, starts it with auth as the chart does,
// creates tenant acme with quotas, chats once over HTTP with a tool call,
// has a request refused for its quota and one for want of a token, and
// returns its /metrics once enough says the chat's metrics are in (or after
// 30 seconds).
func scrapeAgentd(t *testing.T, enough func(*scrape) bool) *scrape {
	t.Helper()
	bin := buildAgentd(t)
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	// As the chart runs it: auth on, /metrics on a listener of its own.
	a := startAgentd(t, bin, "--data", data, "--http", "127.0.0.1:0", "--nats-listen", "127.0.0.1:0",
		"--metrics-listen", "127.0.0.1:0", "--auth", "--local-rate", "-1", "--log-format", "json")

	// tenant create, as NOTES.txt has it (with a file, not --out -, here).
	cmd := exec.Command(bin, "tenant", "create", "acme", "--nats-url", a.natsURL,
		"--creds", filepath.Join(data, "admin.creds"), "--out", filepath.Join(dir, "creds"),
		"--max-agents", "1", "--max-bytes", "1GiB", "--rate", "100")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("agentd tenant create: %v\n%s", err, stderrOf(err))
	}
	var tenant struct{ Token string }
	if err := json.Unmarshal(out, &tenant); err != nil || tenant.Token == "" {
		t.Fatalf("tenant create printed %q (%v)", out, err)
	}

	chat := func(agent, token string) (int, string) {
		body := `{"id":"` + agent + `","messages":[{"id":"u1","role":"user","parts":[{"type":"text","text":"/tool clock {}"}]}]}`
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, a.base+"/v1/chat", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		reply, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(reply)
	}
	// One chat turn with a tool call: two steps, a tool call, chunks
	// streamed to an HTTP follower.
	if code, reply := chat("metrics", tenant.Token); code != http.StatusOK {
		t.Fatalf("POST /v1/chat: %d %s", code, reply)
	}
	// A second agent is over acme's agents quota; no token is a 401.
	if code, reply := chat("second", tenant.Token); code != http.StatusTooManyRequests {
		t.Fatalf("POST /v1/chat for a second agent over the quota: %d %s, want 429", code, reply)
	}
	if code, reply := chat("metrics", ""); code != http.StatusUnauthorized {
		t.Fatalf("POST /v1/chat without a token: %d %s, want 401", code, reply)
	}

	var s *scrape
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		resp, err := http.Get(a.metrics + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if s = parseScrape(string(b)); enough(s) || time.Now().After(deadline) {
			return s
		}
	}
}

// agentdBuild is the agentd binary the tests share: built once, removed by
// TestMain.
var agentdBuild struct {
	once sync.Once
	dir  string
	path string
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if agentdBuild.dir != "" {
		os.RemoveAll(agentdBuild.dir)
	}
	os.Exit(code)
}

// buildAgentd builds ./agentd/cmd/agentd once and returns its path.
func buildAgentd(t *testing.T) string {
	t.Helper()
	agentdBuild.once.Do(func() {
		goBin, err := exec.LookPath("go")
		if err != nil {
			goBin = filepath.Join(os.Getenv("GOROOT"), "bin", "go")
		}
		if agentdBuild.dir, agentdBuild.err = os.MkdirTemp("", "chartcheck"); agentdBuild.err != nil {
			return
		}
		agentdBuild.path = filepath.Join(agentdBuild.dir, "agentd")
		cmd := exec.Command(goBin, "build", "-o", agentdBuild.path, "./agentd/cmd/agentd")
		cmd.Dir = filepath.Join("..", "..")
		if out, err := cmd.CombinedOutput(); err != nil {
			agentdBuild.err = fmt.Errorf("go build agentd: %v\n%s", err, out)
		}
	})
	if agentdBuild.err != nil {
		t.Fatal(agentdBuild.err)
	}
	return agentdBuild.path
}

// runningAgentd is a running agentd and the addresses it logged.
type runningAgentd struct {
	base    string // http://host:port
	metrics string // http://host:port of /metrics
	natsURL string
}

// startAgentd starts agentd with args (which must include --log-format
// json), reads its addresses from its "agentd started" line, waits for
// /readyz, and stops it (SIGTERM, then SIGKILL) when the test ends.
func startAgentd(t *testing.T, bin string, args ...string) runningAgentd {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "FOREVER_LOG_LEVEL=info")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var (
		mu      sync.Mutex
		log     strings.Builder
		started = make(chan runningAgentd, 1)
		exited  = make(chan error, 1)
	)
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			mu.Lock()
			log.WriteString(sc.Text() + "\n")
			mu.Unlock()
			// The node's start line; its tenants' daemons log one too,
			// with a tenant key.
			var line struct {
				Msg     string  `json:"msg"`
				HTTP    string  `json:"http"`
				Metrics string  `json:"metrics"`
				NATSURL string  `json:"nats_url"`
				Tenant  *string `json:"tenant"`
			}
			if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "agentd started" && line.Tenant == nil {
				select {
				case started <- runningAgentd{base: "http://" + line.HTTP, metrics: "http://" + line.Metrics, natsURL: line.NATSURL}:
				default:
				}
			}
		}
		exited <- cmd.Wait()
	}()
	logText := func() string {
		mu.Lock()
		defer mu.Unlock()
		return log.String()
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
	})
	var a runningAgentd
	select {
	case a = <-started:
	case err := <-exited:
		exited <- err // for the cleanup, which waits for it
		t.Fatalf("agentd exited before it started: %v\n%s", err, logText())
	case <-time.After(60 * time.Second):
		t.Fatalf("agentd did not start in 60s:\n%s", logText())
	}
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if resp, err := http.Get(a.base + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return a
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("agentd not ready in 60s:\n%s", logText())
		}
	}
}

// stderrOf returns the stderr an *exec.ExitError carries.
func stderrOf(err error) string {
	if ee, ok := err.(*exec.ExitError); ok {
		return string(ee.Stderr)
	}
	return ""
}
