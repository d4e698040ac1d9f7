package eventlog_test

import (
	"testing"

	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/eventlog/eventlogtest"
)

// TestScanFrom: ScanFrom yields the rows under a prefix from a key on, and
// nothing from a key past the prefix.
func TestScanFrom(t *testing.T) {
	lg, _ := eventlogtest.Open(t, eventlog.Config{})
	appendN(t, lg, 100, 10) // agent0..agent9: rows n/agentK and h/agentK
	pr, err := lg.NewProjector(counter(1))
	if err != nil {
		t.Fatal(err)
	}
	eventlogtest.RunProjector(t, pr)
	if err := pr.WaitFor(t.Context(), 100); err != nil {
		t.Fatal(err)
	}
	v, err := lg.View("counter")
	if err != nil {
		t.Fatal(err)
	}
	keys := func(prefix, from string) []string {
		var out []string
		for kv, err := range v.ScanFrom([]byte(prefix), []byte(from)) {
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, string(kv.Key))
		}
		return out
	}
	for _, tc := range []struct {
		name, prefix, from string
		want               []string
	}{
		{"from inside", "n/", "n/agent7", []string{"n/agent7", "n/agent8", "n/agent9"}},
		{"after a key", "n/", "n/agent8\x00", []string{"n/agent9"}},
		{"from below the prefix", "n/agent", "a", []string{"n/agent0", "n/agent1", "n/agent2", "n/agent3", "n/agent4", "n/agent5", "n/agent6", "n/agent7", "n/agent8", "n/agent9"}},
		{"from past the prefix", "h/", "n/", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := keys(tc.prefix, tc.from)
			if len(got) != len(tc.want) {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Fatalf("got %q, want %q", got, tc.want)
				}
			}
		})
	}
}

// TestScanSeek: ScanSeek visits the rows under a prefix in order, goes on
// from the key visit returns, skipping the rows before it, and ends when
// visit stops it.
func TestScanSeek(t *testing.T) {
	lg, _ := eventlogtest.Open(t, eventlog.Config{})
	appendN(t, lg, 100, 10) // agent0..agent9: rows n/agentK and h/agentK
	pr, err := lg.NewProjector(counter(1))
	if err != nil {
		t.Fatal(err)
	}
	eventlogtest.RunProjector(t, pr)
	if err := pr.WaitFor(t.Context(), 100); err != nil {
		t.Fatal(err)
	}
	v, err := lg.View("counter")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	err = v.ScanSeek([]byte("n/"), func(kv eventlog.KV) ([]byte, bool) {
		got = append(got, string(kv.Key))
		switch string(kv.Key) {
		case "n/agent1":
			return []byte("n/agent5"), false
		case "n/agent7":
			return nil, true
		}
		return nil, false
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"n/agent0", "n/agent1", "n/agent5", "n/agent6", "n/agent7"}; len(got) != len(want) || got[0] != want[0] || got[2] != want[2] || got[4] != want[4] {
		t.Fatalf("visited %q, want %q", got, want)
	}
}
