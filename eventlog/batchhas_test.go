package eventlog_test

import (
	"encoding/json"
	"fmt"
	"sync"
	"testing"

	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/eventlog/eventlogtest"
)

// TestBatchHas: Has sees a row an earlier commit wrote and one this batch
// wrote before it, and no row that was never written or was deleted.
func TestBatchHas(t *testing.T) {
	lg, _ := eventlogtest.Open(t, eventlog.Config{})
	var mu sync.Mutex
	var got []string
	p := eventlog.Projection{Name: "has", Version: 1, Apply: func(b *eventlog.Batch, e eventlog.Event) error {
		has := func(k string) bool {
			ok, err := b.Has([]byte(k))
			if err != nil {
				t.Error(err)
			}
			return ok
		}
		line := fmt.Sprintf("%s: earlier %v", e.ID, has("earlier"))
		if err := b.Set([]byte("mine-"+e.ID), []byte("x")); err != nil {
			return err
		}
		line += fmt.Sprintf(", mine %v, never %v", has("mine-"+e.ID), has("never"))
		if err := b.Set([]byte("earlier"), []byte("y")); err != nil {
			return err
		}
		if err := b.Delete([]byte("mine-" + e.ID)); err != nil {
			return err
		}
		line += fmt.Sprintf(", deleted %v", has("mine-"+e.ID))
		mu.Lock()
		got = append(got, line)
		mu.Unlock()
		return nil
	}}
	f := newFollower(t, lg, p)
	eventlogtest.RunFollower(t, f)
	for _, id := range []string{"e1", "e2"} {
		seq, err := lg.Append(t.Context(), eventlog.Event{Agent: "a1", Type: "tick", ID: id, Data: json.RawMessage(`1`)})
		if err != nil {
			t.Fatal(err)
		}
		if err := f.WaitFor(t.Context(), seq); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	want := []string{
		"e1: earlier false, mine true, never false, deleted false",
		"e2: earlier true, mine true, never false, deleted false",
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("Has saw\n%q\nwant\n%q", got, want)
	}
}
