package fiber_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/fiber"
)

// Compile-time check that the event log is what a Runner needs.
var _ fiber.Log = (*eventlog.Log)(nil)

type progress struct {
	Topic string
	Done  int
}

// A research fiber checkpoints its loop position, makes each LLM call an
// idempotent step, and resumes from its snapshot after a crash.
func ExampleRunner() {
	ctx := context.Background()
	var lg *eventlog.Log // from eventlog.Open

	table, pr, err := fiber.OpenTable(lg) // once per process, shared by all agents
	if err != nil {
		log.Fatal(err)
	}
	go pr.Run(ctx)

	research := func(ctx context.Context, st progress) error {
		for ; st.Done < 3; st.Done++ {
			key := fmt.Sprintf("llm-%d", st.Done) // names the work, stable across resumes
			answer, err := fiber.StepJSON(ctx, key, func(ctx context.Context, opID string) (string, error) {
				return "answer about " + st.Topic, nil // pass opID upstream as the idempotency key
			})
			if err != nil {
				return err
			}
			_ = answer
			if err := fiber.Stash(ctx, progress{st.Topic, st.Done + 1}); err != nil {
				return err
			}
		}
		return nil
	}

	var r *fiber.Runner
	r, err = fiber.New(fiber.Config{
		Log: lg, Table: table, Agent: "researcher-1",
		Hooks: fiber.Hooks{
			OnFiberRecovered: func(ctx context.Context, rec fiber.Recovered) error {
				var st progress
				if err := rec.Decode(&st); err != nil && !errors.Is(err, fiber.ErrNoSnapshot) {
					return err
				}
				return r.GoResume(ctx, rec, func(ctx context.Context, f *fiber.Fiber) error {
					return research(ctx, st)
				})
			},
			OnError: func(ctx context.Context, err error) { log.Print(err) },
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer r.Close()

	<-table.Ready()
	if err := r.Recover(ctx); err != nil { // resume what a previous process left
		log.Fatal(err)
	}
	id, err := r.Go(ctx, "research", func(ctx context.Context, f *fiber.Fiber) error {
		return research(ctx, progress{Topic: "fibers"})
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("started", id)
}
