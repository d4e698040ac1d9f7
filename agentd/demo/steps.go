package demo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/forever-agents/forever/agentd/host"
	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/fiber"
)

// Events of the steps agent.
const (
	// EventStepExecuted is the steps agent's side effect: one event each time
	// a step's operation body runs. It is appended with a fresh id on purpose,
	// so a repeated run shows up (a real side effect would pass the op id
	// upstream as its idempotency key).
	EventStepExecuted = "steps.executed"
	// EventStepsRecovered records what the recovery hook was handed.
	EventStepsRecovered = "steps.recovered"
)

// StepsVerbs are the command verbs of the steps agent type, besides the
// host's: register it with host.TypeSpec{Name: "steps", Factory:
// demo.NewStepsAgent, Verbs: demo.StepsVerbs}.
var StepsVerbs = []string{"start"}

// StepsStart is the payload of the steps agent's "start" command.
type StepsStart struct {
	Steps   int `json:"steps"`   // default 10
	DelayMS int `json:"delayMs"` // default 500
	// RecoveryDelayMS makes the recovery hook wait before it resumes: a
	// slow recovery, to demonstrate (and test) a crash during recovery.
	RecoveryDelayMS int `json:"recoveryDelayMs,omitempty"`
	// Effect is what a step's operation body does: "event" (the default)
	// appends EventStepExecuted, a side effect the log shows; "none" does
	// nothing, like the activity of the Temporal bench, so a step costs
	// one synced write: its op.completed, which also starts the next step.
	Effect string `json:"effect,omitempty"`
}

// Step effects of StepsStart.Effect.
const (
	StepEffectEvent = "event"
	StepEffectNone  = "none"
)

// StepsState is the snapshot a steps fiber stashes after each step.
type StepsState struct {
	Done            int    `json:"done"`
	Total           int    `json:"total"`
	DelayMS         int    `json:"delayMs"`
	RecoveryDelayMS int    `json:"recoveryDelayMs,omitempty"`
	Effect          string `json:"effect,omitempty"`
}

// StepExecuted is the data of EventStepExecuted.
type StepExecuted struct {
	Fiber string `json:"fiber"`
	Step  int    `json:"step"`
	OpID  string `json:"opId"`
}

// StepsRecovered is the data of EventStepsRecovered.
type StepsRecovered struct {
	Fiber   string `json:"fiber"`
	Done    int    `json:"done"`
	Attempt int    `json:"attempt"`
}

// StepsAgent is the built-in example agent type "steps": its start command
// runs a fiber of N steps with a delay each; every step is an idempotent
// fiber.Step followed by a stash, and a recovered fiber resumes from its
// snapshot. It demonstrates durability and is the target of the crash tests.
type StepsAgent struct{ env *host.Env }

// NewStepsAgent is the Factory of the steps agent type.
func NewStepsAgent(_ context.Context, env *host.Env) (host.Agent, error) {
	return &StepsAgent{env: env}, nil
}

// HandleCommand takes "start".
func (a *StepsAgent) HandleCommand(ctx context.Context, cmd host.Command) (any, error) {
	switch cmd.Verb {
	case "start":
		req, err := parseStepsStart(cmd.Data)
		if err != nil {
			return nil, err
		}
		st := StepsState{Total: req.Steps, DelayMS: req.DelayMS, RecoveryDelayMS: req.RecoveryDelayMS, Effect: req.Effect}
		// The first snapshot and the first step's op.started go with
		// fiber.started: starting and running the first step cost two
		// synced writes before the step's own.
		id, err := a.env.Fibers.Go(ctx, "steps", func(ctx context.Context, f *fiber.Fiber) error {
			return a.run(ctx, f, st)
		}, fiber.WithSnapshot(st), fiber.FirstStep(stepKey(0)))
		if err != nil {
			return nil, err
		}
		return map[string]string{"fiber": id}, nil
	case "status":
		return nil, nil
	}
	return nil, host.ErrNotFound.Wrapf("steps agent takes start, not %q", cmd.Verb)
}

// parseStepsStart decodes and checks a start payload; empty means the
// defaults. Errors wrap ErrBadRequest.
func parseStepsStart(data json.RawMessage) (StepsStart, error) {
	req := StepsStart{Steps: 10, DelayMS: 500}
	if len(data) > 0 {
		if err := json.Unmarshal(data, &req); err != nil {
			return StepsStart{}, host.ErrBadRequest.Wrapf("start: %v", err)
		}
	}
	if req.Steps <= 0 || req.Steps > 100000 || req.DelayMS < 0 || req.RecoveryDelayMS < 0 {
		return StepsStart{}, host.ErrBadRequest.Wrapf("start: steps must be 1..100000 and delays >= 0")
	}
	switch req.Effect {
	case "", StepEffectEvent, StepEffectNone:
	default:
		return StepsStart{}, host.ErrBadRequest.Wrapf("start: effect must be %q or %q, not %q", StepEffectEvent, StepEffectNone, req.Effect)
	}
	return req, nil
}

// OnFiberRecovered resumes a steps fiber from its last snapshot.
func (a *StepsAgent) OnFiberRecovered(ctx context.Context, rec fiber.Recovered) error {
	var st StepsState
	if err := rec.Decode(&st); err != nil {
		return err // corrupt or missing: retried, then abandoned
	}
	select {
	case <-time.After(time.Duration(st.RecoveryDelayMS) * time.Millisecond):
	case <-ctx.Done():
		return ctx.Err()
	}
	data, _ := json.Marshal(StepsRecovered{Fiber: rec.ID, Done: st.Done, Attempt: rec.Attempt})
	if _, err := a.env.Log.Append(ctx, eventlog.Event{Agent: a.env.ID, Type: EventStepsRecovered, Data: data}); err != nil {
		return err
	}
	return a.env.Fibers.GoResume(ctx, rec, func(ctx context.Context, f *fiber.Fiber) error {
		return a.run(ctx, f, st)
	})
}

// stepKey names step i of a steps fiber.
func stepKey(i int) string { return fmt.Sprintf("step-%d", i) }

func (a *StepsAgent) run(ctx context.Context, f *fiber.Fiber, st StepsState) error {
	delay := time.Duration(st.DelayMS) * time.Millisecond
	for st.Done < st.Total {
		select {
		case <-time.After(delay):
		case <-ctx.Done():
			return ctx.Err()
		}
		step := st.Done
		next := st
		next.Done++
		// The snapshot after the step goes with its completion, and so does
		// the next step's op.started: one synced write per step.
		opts := []fiber.StepOpt{fiber.ThenStash(next)}
		if next.Done < next.Total {
			opts = append(opts, fiber.ThenStep(stepKey(next.Done)))
		}
		_, err := fiber.Step(ctx, stepKey(step), func(ctx context.Context, opID string) (json.RawMessage, error) {
			if st.Effect == StepEffectNone {
				return json.RawMessage(fmt.Sprint(step)), nil
			}
			data, _ := json.Marshal(StepExecuted{Fiber: f.ID(), Step: step, OpID: opID})
			_, err := a.env.Log.Append(ctx, eventlog.Event{Agent: a.env.ID, Type: EventStepExecuted, Data: data})
			return json.RawMessage(fmt.Sprint(step)), err
		}, opts...)
		switch {
		case errors.Is(err, eventlog.ErrDuplicate):
			if err := f.Stash(ctx, next); err != nil {
				return err
			}
		case err != nil:
			return err
		}
		st = next
	}
	return nil
}
