package eventlog_test

import (
	"encoding/json"
	"testing"

	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/eventlog/eventlogtest"
)

// TestDeletePrefix: DeletePrefix removes the rows under a prefix, those
// committed before and those written earlier in the same batch, and no
// other row, including one whose key only shares the prefix's start.
func TestDeletePrefix(t *testing.T) {
	lg, _ := eventlogtest.Open(t, eventlog.Config{})
	pr, err := lg.NewProjector(eventlog.Projection{
		Name:    "rows",
		Version: 1,
		Apply: func(b *eventlog.Batch, e eventlog.Event) error {
			var op struct{ Set, Drop string }
			if err := json.Unmarshal(e.Data, &op); err != nil {
				return err
			}
			if op.Set != "" {
				if err := b.Set([]byte(op.Set), []byte("v")); err != nil {
					return err
				}
			}
			if op.Drop != "" {
				return b.DeletePrefix([]byte(op.Drop))
			}
			return nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	eventlogtest.RunProjector(t, pr)
	var last eventlog.Seq
	for _, d := range []string{
		`{"Set":"f/1/a"}`, `{"Set":"f/1/b"}`, `{"Set":"f/10/a"}`, `{"Set":"f/2/a"}`,
		`{"Set":"f/1/c","Drop":"f/1/"}`, // c is written in the batch that drops it
	} {
		if last, err = lg.Append(t.Context(), eventlog.Event{Agent: "a", Type: "row.op", Data: json.RawMessage(d)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := pr.WaitFor(t.Context(), last); err != nil {
		t.Fatal(err)
	}
	got := dump(t, lg, "rows")
	want := map[string]string{"f/10/a": "v", "f/2/a": "v"}
	if !equalMaps(got, want) {
		t.Fatalf("rows = %v, want %v", got, want)
	}
}
