package eventlog_test

import (
	"encoding/json"
	"sync"
	"testing"

	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/eventlog/eventlogtest"
)

// TestBatchAfterCommit: a func an Apply registers with AfterCommit runs
// once per commit, sees the rows the commit wrote through the View, and
// has run when a WaitFor of the event's sequence returns.
func TestBatchAfterCommit(t *testing.T) {
	lg, _ := eventlogtest.Open(t, eventlog.Config{})
	var mu sync.Mutex
	seen := map[string]bool{} // event id: its row was visible when the func ran
	var v *eventlog.View
	p := eventlog.Projection{Name: "after", Version: 1, Apply: func(b *eventlog.Batch, e eventlog.Event) error {
		if err := b.Set([]byte(e.ID), e.Data); err != nil {
			return err
		}
		b.AfterCommit(func() {
			_, err := v.Get([]byte(e.ID))
			mu.Lock()
			defer mu.Unlock()
			if _, dup := seen[e.ID]; dup {
				t.Errorf("after-commit func of %s ran twice", e.ID)
			}
			seen[e.ID] = err == nil
		})
		return nil
	}}
	f := newFollower(t, lg, p)
	var err error
	if v, err = lg.View("after"); err != nil {
		t.Fatal(err)
	}
	eventlogtest.RunFollower(t, f)
	for i := range 20 {
		e := eventlog.Event{Agent: "a1", Type: "tick", Data: json.RawMessage(`1`)}
		if i%2 == 1 {
			e.Agent = "a2"
		}
		seq, err := lg.Append(t.Context(), e)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.WaitFor(t.Context(), seq); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		n, all := len(seen), true
		for _, ok := range seen {
			all = all && ok
		}
		mu.Unlock()
		if n != i+1 || !all {
			t.Fatalf("after WaitFor of event %d: %d funcs ran, every row visible to them: %v", i+1, n, all)
		}
	}
}
