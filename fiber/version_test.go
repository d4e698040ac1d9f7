package fiber_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/forever-agents/forever/fiber"
	"github.com/forever-agents/forever/verify"
)

// clean checks the log with package verify.
func clean(t *testing.T, e *env) {
	t.Helper()
	if rep, err := verify.Check(t.Context(), e.lg, verify.Options{}); err != nil || !rep.OK() {
		t.Fatalf("verify: %v %+v", err, rep)
	}
}

// startedBy leaves a fiber started by version v in the log, interrupted
// mid-run after stashing snap: a Runner of version v runs it and closes
// under it (a rolling upgrade stops the old process).
func startedBy(t *testing.T, e *env, v, snap string) string {
	t.Helper()
	r := e.runner(t, fiber.Config{Version: v})
	stashed := make(chan struct{})
	id, err := r.Go(t.Context(), "research", func(ctx context.Context, f *fiber.Fiber) error {
		if err := fiber.Stash(ctx, json.RawMessage(snap)); err != nil {
			return err
		}
		close(stashed)
		<-ctx.Done()
		return ctx.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	<-stashed
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	rows := e.rows(t)
	if len(rows) != 1 || rows[0].Version != v || rows[0].RanUnder() != v {
		t.Fatalf("rows after the old version stopped: %+v", rows)
	}
	return id
}

// A fiber started by version 1 and recovered by version 2 under each
// policy ends as the policy documents; a fiber started unversioned, or
// recovered by the version that started it, sees no policy.
func TestVersionPolicy(t *testing.T) {
	t.Run("ContinueMigrates", func(t *testing.T) {
		e := newEnv(t)
		id := startedBy(t, e, "1", `{"step":1}`)
		var migrations atomic.Int32
		var r *fiber.Runner
		var got fiber.Recovered
		hooks := fiber.Hooks{
			MigrateSnapshot: func(ctx context.Context, rec fiber.Recovered) (json.RawMessage, error) {
				migrations.Add(1)
				if rec.From != "1" || string(rec.Snapshot) != `{"step":1}` {
					t.Errorf("migrate got from %q snapshot %s", rec.From, rec.Snapshot)
				}
				return json.RawMessage(`{"step":1,"format":2}`), nil
			},
			OnFiberRecovered: func(ctx context.Context, rec fiber.Recovered) error {
				got = rec
				return r.GoResume(ctx, rec, func(ctx context.Context, f *fiber.Fiber) error {
					<-ctx.Done() // the new version's process dies here too
					return ctx.Err()
				})
			},
		}
		r = e.runner(t, fiber.Config{Version: "2", Hooks: hooks})
		if err := r.Recover(t.Context()); err != nil {
			t.Fatal(err)
		}
		if got.ID != id || got.Version != "1" || got.From != "1" || got.Restarted || string(got.Snapshot) != `{"step":1,"format":2}` {
			t.Fatalf("hook got %+v", got)
		}
		r.Close()
		rows := e.rows(t)
		if len(rows) != 1 || rows[0].Version != "1" || rows[0].LastVersion != "2" || string(rows[0].Snapshot) != `{"step":1,"format":2}` {
			t.Fatalf("row after the migration: %+v", rows)
		}
		// A crash after the migration was recorded: version 2 recovers the
		// migrated snapshot without migrating it again, and completes.
		hooks.OnFiberRecovered = func(ctx context.Context, rec fiber.Recovered) error {
			got = rec
			return r.Resume(ctx, rec, func(ctx context.Context, f *fiber.Fiber) error { return nil })
		}
		r = e.runner(t, fiber.Config{Version: "2", Hooks: hooks})
		if err := r.Recover(t.Context()); err != nil {
			t.Fatal(err)
		}
		if migrations.Load() != 1 || got.From != "2" || string(got.Snapshot) != `{"step":1,"format":2}` {
			t.Fatalf("second recovery: %d migrations, hook got %+v", migrations.Load(), got)
		}
		if rows := e.rows(t); len(rows) != 0 {
			t.Fatalf("rows after completion: %+v", rows)
		}
		clean(t, e)
	})

	t.Run("Restart", func(t *testing.T) {
		e := newEnv(t)
		startedBy(t, e, "1", `{"step":1}`)
		var r *fiber.Runner
		var got fiber.Recovered
		r = e.runner(t, fiber.Config{Version: "2", VersionPolicy: fiber.VersionRestart, Hooks: fiber.Hooks{
			MigrateSnapshot: func(context.Context, fiber.Recovered) (json.RawMessage, error) {
				t.Error("a restart migrated the snapshot")
				return nil, nil
			},
			OnFiberRecovered: func(ctx context.Context, rec fiber.Recovered) error {
				got = rec
				var st map[string]int
				if err := rec.Decode(&st); !errors.Is(err, fiber.ErrNoSnapshot) {
					t.Errorf("restarted fiber decodes a snapshot: %v %v", st, err)
				}
				return r.GoResume(ctx, rec, func(ctx context.Context, f *fiber.Fiber) error {
					<-ctx.Done() // dies before its first stash
					return ctx.Err()
				})
			},
		}})
		if err := r.Recover(t.Context()); err != nil {
			t.Fatal(err)
		}
		if !got.Restarted || got.Snapshot != nil || got.From != "1" {
			t.Fatalf("hook got %+v", got)
		}
		r.Close()
		recs := e.events(t, fiber.EventRecovered)
		if d := decodeData(t, recs[len(recs)-1]); d["version"] != "2" || d["snapshot"] != nil || d["restart"] != true {
			t.Fatalf("fiber.recovered of a restart: %v", d)
		}
		// Recovered again before it stashed: still a restart, under the
		// new version; its first stash ends that.
		r = e.runner(t, fiber.Config{Version: "2", VersionPolicy: fiber.VersionRestart, Hooks: fiber.Hooks{
			OnFiberRecovered: func(ctx context.Context, rec fiber.Recovered) error {
				got = rec
				return r.Resume(ctx, rec, func(ctx context.Context, f *fiber.Fiber) error {
					if err := fiber.Stash(ctx, map[string]int{"step": 0}); err != nil {
						return err
					}
					if rows := e.rows(t); len(rows) != 1 || rows[0].Restarted {
						t.Errorf("row after the restarted fiber's stash: %+v", rows)
					}
					return nil
				})
			},
		}})
		if err := r.Recover(t.Context()); err != nil {
			t.Fatal(err)
		}
		if !got.Restarted || got.Snapshot != nil || got.From != "2" {
			t.Fatalf("second recovery got %+v", got)
		}
		if n := len(e.events(t, fiber.EventCompleted)); n != 1 {
			t.Fatalf("%d fiber.completed", n)
		}
		clean(t, e)
	})

	t.Run("Fail", func(t *testing.T) {
		e := newEnv(t)
		id := startedBy(t, e, "1", `{"step":1}`)
		sink := newErrSink()
		called := false
		r := e.runner(t, fiber.Config{Version: "2", VersionPolicy: fiber.VersionFail, Hooks: fiber.Hooks{
			OnFiberRecovered: func(context.Context, fiber.Recovered) error { called = true; return nil },
			OnError:          sink.OnError,
		}})
		if err := r.Recover(t.Context()); err != nil {
			t.Fatal(err)
		}
		if called {
			t.Fatal("the recovery hook ran a fiber its policy fails")
		}
		var verr *fiber.VersionError
		if err := sink.next(t); !errors.As(err, &verr) || !errors.Is(err, fiber.ErrVersionChanged) || verr.ID != id || verr.From != "1" || verr.To != "2" {
			t.Fatalf("reported %v", err)
		}
		failed := e.events(t, fiber.EventFailed)
		if len(failed) != 1 {
			t.Fatalf("%d fiber.failed", len(failed))
		}
		reason, _ := decodeData(t, failed[0])["error"].(string)
		for _, want := range []string{`version "1"`, `version "2"`, "policy is fail"} {
			if !strings.Contains(reason, want) {
				t.Errorf("reason %q does not say %s", reason, want)
			}
		}
		if rows := e.rows(t); len(rows) != 0 {
			t.Fatalf("rows: %+v", rows)
		}
		clean(t, e)
	})

	t.Run("FailedMigrationFails", func(t *testing.T) {
		e := newEnv(t)
		startedBy(t, e, "1", `{"step":1}`)
		sink := newErrSink()
		var handed error
		r := e.runner(t, fiber.Config{Version: "2", Hooks: fiber.Hooks{
			MigrateSnapshot: func(context.Context, fiber.Recovered) (json.RawMessage, error) {
				return nil, errBoom
			},
			OnFiberRecovered: func(context.Context, fiber.Recovered) error {
				t.Error("the recovery hook ran a fiber whose migration failed")
				return nil
			},
			OnVersionFailed: func(ctx context.Context, rec fiber.Recovered, err error) error {
				handed = err
				return nil
			},
			OnError: sink.OnError,
		}})
		if err := r.Recover(t.Context()); err != nil {
			t.Fatal(err)
		}
		if !errors.Is(handed, errBoom) || !errors.Is(handed, fiber.ErrVersionChanged) {
			t.Fatalf("OnVersionFailed got %v", handed)
		}
		if err := sink.next(t); !errors.Is(err, errBoom) {
			t.Fatalf("reported %v", err)
		}
		if n := len(e.events(t, fiber.EventFailed)); n != 1 {
			t.Fatalf("%d fiber.failed", n)
		}
		clean(t, e)
	})

	t.Run("SameOrUnversioned", func(t *testing.T) {
		for _, c := range []struct{ started, recovering string }{{"1", "1"}, {"", "2"}, {"1", ""}} {
			e := newEnv(t)
			startedBy(t, e, c.started, `{"step":1}`)
			var r *fiber.Runner
			var got fiber.Recovered
			r = e.runner(t, fiber.Config{Version: c.recovering, VersionPolicy: fiber.VersionFail, Hooks: fiber.Hooks{
				OnFiberRecovered: func(ctx context.Context, rec fiber.Recovered) error {
					got = rec
					return r.Resume(ctx, rec, func(ctx context.Context, f *fiber.Fiber) error { return nil })
				},
			}})
			if err := r.Recover(t.Context()); err != nil {
				t.Fatal(err)
			}
			if string(got.Snapshot) != `{"step":1}` || got.Restarted {
				t.Fatalf("%+v: hook got %+v", c, got)
			}
			if n := len(e.events(t, fiber.EventFailed)); n != 0 {
				t.Fatalf("%+v: %d fiber.failed", c, n)
			}
		}
	})
}

func TestVersionPolicyInvalid(t *testing.T) {
	e := newEnv(t)
	_, err := fiber.New(fiber.Config{Log: e.lg, Table: e.table, Agent: agent, VersionPolicy: "pin"})
	if !errors.Is(err, fiber.ErrInvalid) || !strings.Contains(err.Error(), "continue, restart or fail") {
		t.Fatalf("got %v", err)
	}
}
