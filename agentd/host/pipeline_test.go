package host

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"testing"
)

// TestChainWalksForward: chain runs its stages in the order it lists
// them, then the handler, each once; a stage that answers does not reach
// the stages after it.
func TestChainWalksForward(t *testing.T) {
	var walked []string
	step := func(name string, refuse bool) stage {
		return func(next handler) handler {
			return func(ctx context.Context, cmd Command) (json.RawMessage, error) {
				walked = append(walked, name)
				if refuse {
					return nil, errors.New(name + " refused")
				}
				return next(ctx, cmd)
			}
		}
	}
	end := func(context.Context, Command) (json.RawMessage, error) {
		walked = append(walked, "dispatch")
		return json.RawMessage(`{}`), nil
	}
	out, err := chain(step("edge", false), step("access", false), step("route", false))(end)(t.Context(), Command{})
	if err != nil || string(out) != `{}` {
		t.Fatalf("chain: %s, %v", out, err)
	}
	if want := []string{"edge", "access", "route", "dispatch"}; !slices.Equal(walked, want) {
		t.Fatalf("walked %v, want %v", walked, want)
	}
	walked = nil
	if _, err := chain(step("access", true), step("route", false))(end)(t.Context(), Command{}); err == nil {
		t.Fatal("a refusing stage's error was lost")
	}
	if want := []string{"access"}; !slices.Equal(walked, want) {
		t.Fatalf("walked %v past a refusal, want %v", walked, want)
	}
}

// TestPathIsBuilt: New builds the command path once, both its entries.
func TestPathIsBuilt(t *testing.T) {
	h := New(Config{})
	if h.path.command == nil || h.path.local == nil {
		t.Fatal("New left the command path unbuilt")
	}
}
