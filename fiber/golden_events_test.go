package fiber_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/forever-agents/forever/fiber"
)

// fixedClock is a Clock stuck at one instant; waits are real.
type fixedClock struct{ t time.Time }

func (c fixedClock) Now() time.Time                         { return c.t }
func (c fixedClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// TestGoldenEvents runs a scripted scenario (run with a stash and a step, a
// failure, an interruption and a recovery with one failed hook) and compares
// the events the Runner wrote, with fiber and op IDs normalized, against
// testdata/events.golden.json. It guards the event format.
// Regenerate with: go test ./fiber -run TestGoldenEvents -update
func TestGoldenEvents(t *testing.T) {
	clock := fixedClock{time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)}
	e1 := newEnv(t)
	r1 := e1.runner(t, fiber.Config{Clock: clock})
	ctx := t.Context()
	if err := r1.Run(ctx, "work", func(ctx context.Context, f *fiber.Fiber) error {
		if err := fiber.Stash(ctx, map[string]int{"n": 1}); err != nil {
			return err
		}
		_, err := fiber.StepJSON(ctx, "charge", func(context.Context, string) (int, error) { return 42, nil })
		return err
	}); err != nil {
		t.Fatal(err)
	}
	r1.Run(ctx, "bad", func(context.Context, *fiber.Fiber) error { return errBoom })
	running := make(chan struct{})
	r1.Go(ctx, "long", func(ctx context.Context, f *fiber.Fiber) error {
		if err := fiber.Stash(ctx, "half"); err != nil {
			return err
		}
		close(running)
		<-ctx.Done()
		return ctx.Err()
	})
	<-running
	r1.Close()

	e2 := e1.restart(t)
	var r2 *fiber.Runner
	h := &hookRecorder{answer: func(ctx context.Context, n int, rec fiber.Recovered) error {
		if n == 1 {
			return errBoom
		}
		return r2.Resume(ctx, rec, func(ctx context.Context, f *fiber.Fiber) error { return nil })
	}}
	r2 = e2.runner(t, fiber.Config{Clock: clock, Hooks: fiber.Hooks{OnFiberRecovered: h.hook}})
	if err := r2.Recover(ctx); err != nil {
		t.Fatal(err)
	}

	names := map[string]string{}
	norm := func(prefix, id string) string {
		if _, ok := names[id]; !ok {
			names[id] = fmt.Sprintf("%s%d", prefix, len(names)+1)
		}
		return names[id]
	}
	var buf bytes.Buffer
	for _, ev := range e2.events(t) {
		d := decodeData(t, ev)
		for _, k := range []string{"id", "fiber"} {
			if v, ok := d[k].(string); ok {
				d[k] = norm("F", v)
			}
		}
		if v, ok := d["opId"].(string); ok {
			d["opId"] = norm("OP", v)
		}
		line, _ := json.Marshal(map[string]any{"agent": ev.Agent, "type": ev.Type, "data": d})
		buf.Write(line)
		buf.WriteByte('\n')
	}
	got := buf.Bytes()
	golden := filepath.Join("testdata", "events.golden.jsonl")
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
		t.Fatalf("events differ from %s (run with -update if intended)\ngot:\n%s\nwant:\n%s", golden, got, want)
	}
}
