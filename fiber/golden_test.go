package fiber_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/fiber"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// projected is what the golden files hold: the runs table after a history.
type projected struct {
	Rows []fiber.Row           `json:"rows"`
	Ops  map[string][]fiber.Op `json:"ops"`
}

// TestGoldenHistory appends a recorded event log (testdata/history.json) to a
// real log, projects it with the current RunsProjection and compares the runs
// table with testdata/history.golden.json. It fails when the view the code
// builds from the same events changes, which also guards the event format.
// Regenerate with: go test ./fiber -run TestGoldenHistory -update
func TestGoldenHistory(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("testdata", "history.json"))
	if err != nil {
		t.Fatal(err)
	}
	var history []eventlog.Event
	if err := json.Unmarshal(raw, &history); err != nil {
		t.Fatal(err)
	}
	e := newEnv(t)
	for _, ev := range history {
		if _, err := e.lg.Append(t.Context(), ev); err != nil {
			t.Fatalf("append %s %s: %v", ev.ID, ev.Type, err)
		}
	}
	got := project(t, e)

	// Rebuilding from the log in a new process gives the same view.
	if again := project(t, e.restart(t)); !bytes.Equal(again, got) {
		t.Fatalf("view rebuilt in a fresh Pebble differs:\n%s\nvs\n%s", again, got)
	}

	golden := filepath.Join("testdata", "history.golden.json")
	if *update {
		if err := os.WriteFile(golden, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("runs table differs from %s (run with -update if intended)\ngot:\n%s\nwant:\n%s", golden, got, want)
	}
}

func project(t *testing.T, e *env) []byte {
	t.Helper()
	e.sync(t)
	rows, err := e.table.Rows("")
	if err != nil {
		t.Fatal(err)
	}
	p := projected{Rows: rows, Ops: map[string][]fiber.Op{}}
	for _, row := range rows {
		ops, err := e.table.Ops(row.Agent, row.ID)
		if err != nil {
			t.Fatal(err)
		}
		if len(ops) > 0 {
			p.Ops[row.Agent+"/"+row.ID] = ops
		}
	}
	out, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return append(out, '\n')
}
