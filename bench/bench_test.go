package main

import (
	"bytes"
	"encoding/json"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestRowRatio(t *testing.T) {
	tests := []struct {
		name      string
		row       Row
		ratio     float64
		pass, has bool
	}{
		{name: "rate", row: Row{Value: 50, BaselineValue: 100}, ratio: 0.5},
		{name: "latency", row: Row{Value: 200, BaselineValue: 100, LowerIsBetter: true}, ratio: 0.5},
		{name: "zero", row: Row{Value: 0, BaselineValue: 100, Target: 1}, ratio: 0, has: true},
		{name: "pass", row: Row{Value: 300, BaselineValue: 100, Target: 3}, ratio: 3, pass: true, has: true},
		{name: "miss", row: Row{Value: 130, BaselineValue: 100, LowerIsBetter: true, Target: 1 / 1.2}, ratio: 100.0 / 130, has: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.row.Ratio(); got != tt.ratio {
				t.Errorf("Ratio() = %v, want %v", got, tt.ratio)
			}
			pass, has := tt.row.Pass()
			if pass != tt.pass || has != tt.has {
				t.Errorf("Pass() = %v, %v, want %v, %v", pass, has, tt.pass, tt.has)
			}
		})
	}
}

func TestAlternate(t *testing.T) {
	var got []string
	rec := func(s string) func(int) error { return func(int) error { got = append(got, s); return nil } }
	if err := alternate(3, rec("b"), rec("s"), rec("x")); err != nil {
		t.Fatal(err)
	}
	if want := []string{"b", "s", "x", "x", "s", "b", "b", "s", "x"}; !slices.Equal(got, want) {
		t.Fatalf("order = %v, want %v", got, want)
	}
	var total int
	for i := range 7 {
		total += split(100, 7, i)
	}
	if total != 100 {
		t.Fatalf("split sums to %d, want 100", total)
	}
}

func TestPercentile(t *testing.T) {
	var lat []time.Duration
	for i := 100; i >= 1; i-- {
		lat = append(lat, time.Duration(i))
	}
	for _, tt := range []struct {
		p    float64
		want time.Duration
	}{{50, 50}, {99, 99}, {100, 100}, {1, 1}} {
		if got := percentile(lat, tt.p); got != tt.want {
			t.Errorf("p%v = %v, want %v", tt.p, got, tt.want)
		}
	}
	if got := percentile(nil, 50); got != 0 {
		t.Errorf("p50 of nothing = %v", got)
	}
}

func TestNumber(t *testing.T) {
	for _, tt := range []struct {
		v    float64
		want string
	}{{1234567.8, "1,234,568"}, {999.4, "999"}, {12.34, "12.3"}, {1.234, "1.23"}, {0, "0.00"}} {
		if got := number(tt.v); got != tt.want {
			t.Errorf("number(%v) = %q, want %q", tt.v, got, tt.want)
		}
	}
}

// TestRunSmoke runs every scenario at a tiny scale on a real embedded server
// and checks that each prints its rows. The scale-out scenario, which
// starts a 3- and a 6-node cluster of agentd processes in CPU cgroups,
// prints only its SKIP row here (-cpu-quota -1): TestCPUCgroups and
// TestProjectionCursors test its parts, and it is run by hand. So is
// restart-share (smokeSkips), which fills and restarts a 3- and a 6-node
// cluster: at CI's scale it doubled this test's time.
//
// failover runs in a bench run of its own beside the others' (smokeApart):
// its 3-node agentd cluster mostly waits (the cluster's start, a lease TTL,
// the stall reads), a third of the whole test's time when it ran in turn.
// The two runs share one agentd build.
//
// The scale is -n 0.001: a smoke test of the scenarios, not a
// measurement. Every count keeps its floor (at least one message, two
// rounds, a whole turn), and the scenarios whose work grows with -n
// (views-rebuild, views-rebuild-chunks, compaction, scale, replay) took
// under -race 2 to 7 times as long at -n 0.01, the whole test 1.8 times
// the CPU.
func TestRunSmoke(t *testing.T) {
	var names []string
	for _, s := range scenarios() {
		if !smokeSkips[s.Name] && !smokeApart[s.Name] {
			names = append(names, regexp.QuoteMeta(s.Name))
		}
	}
	build := &agentdBuild{dir: t.TempDir()}
	outs := map[string]*bytes.Buffer{}
	runs := map[string]string{"others": "^(" + strings.Join(names, "|") + ")$"}
	for name := range smokeApart {
		runs[name] = "^" + regexp.QuoteMeta(name) + "$"
	}
	t.Run("runs", func(t *testing.T) {
		for name, re := range runs {
			out := &bytes.Buffer{}
			outs[name] = out
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				var progress bytes.Buffer
				err := runWith(t.Context(), []string{"-sync", "interval", "-n", "0.001", "-cpu-quota", "-1", "-dir", t.TempDir(), "-run", re}, out, &progress, build)
				if err != nil {
					t.Fatalf("run: %v\n%s", err, progress.String())
				}
			})
		}
	})
	if t.Failed() {
		return
	}
	var all strings.Builder
	for _, out := range outs {
		all.WriteString(out.String())
	}
	for _, s := range scenarios() {
		if s.Requires != "" || smokeSkips[s.Name] {
			continue // needs a tool CI does not build or a cluster, or run by hand
		}
		if !strings.Contains(all.String(), s.Name+" ") {
			t.Errorf("no row for %s in:\n%s", s.Name, all.String())
		}
	}
}

// smokeApart are the scenarios TestRunSmoke runs each in a bench run of
// its own, beside the others.
var smokeApart = map[string]bool{"failover": true}

// smokeSkips are the scenarios TestRunSmoke leaves to a run by hand.
var smokeSkips = map[string]bool{"restart-share": true, "handoff": true}

// TestFiberSmoke runs the fiber scenarios at a tiny scale under sync always
// (TestRunSmoke covers interval) and checks that every row measured both
// sides and that the recovery target row is there.
func TestFiberSmoke(t *testing.T) {
	var out, progress bytes.Buffer
	err := run(t.Context(), []string{"-sync", "always", "-run", "^fiber-", "-n", "0.01", "-json", "-dir", t.TempDir()}, &out, &progress)
	if err != nil {
		t.Fatalf("run: %v\n%s", err, progress.String())
	}
	var rep struct{ Rows []Row }
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("decode: %v\n%s", err, out.String())
	}
	perScenario := map[string]int{}
	targets := 0
	for _, r := range rep.Rows {
		perScenario[r.Scenario]++
		if r.Value <= 0 || r.BaselineValue <= 0 {
			t.Errorf("%s %q: value %v, baseline %q %v: want both measured", r.Scenario, r.Figure, r.Value, r.Baseline, r.BaselineValue)
		}
		if r.Scenario == "fiber-recovery" && r.Target != 0 {
			targets++
		}
	}
	for _, name := range []string{"fiber-run", "fiber-stash", "fiber-recovery"} {
		if perScenario[name] == 0 {
			t.Errorf("no rows for %s", name)
		}
	}
	if got, want := targets, 2; got != want {
		t.Errorf("fiber-recovery target rows = %d, want %d (new and same pebble)", got, want)
	}
}
