package host_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/forever-agents/forever/agentd/host"
	"github.com/forever-agents/forever/fiber"
)

func nopFactory(context.Context, *host.Env) (host.Agent, error) {
	return nil, errors.New("not built in this test")
}

// TestRegisterType: one call registers a type with its whole spec; a spec
// with any fault registers nothing of it; a name registers once.
func TestRegisterType(t *testing.T) {
	h := host.New(host.Config{})
	detail := func(context.Context, string) (any, error) { return nil, nil }
	for _, tc := range []struct {
		name string
		spec host.TypeSpec
	}{
		{"no factory", host.TypeSpec{Name: "t"}},
		{"bad name", host.TypeSpec{Name: "a:b", Factory: nopFactory}},
		{"host verb", host.TypeSpec{Name: "t", Factory: nopFactory, Verbs: []string{"status"}}},
		{"internal not a verb", host.TypeSpec{Name: "t", Factory: nopFactory, Verbs: []string{"go"}, Internal: []string{"other"}}},
		{"half a forking", host.TypeSpec{Name: "t", Factory: nopFactory, Forking: &host.Forking{}}},
		{"bad policy", host.TypeSpec{Name: "t", Factory: nopFactory, Version: &host.TypeVersion{Policy: "sometimes"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := h.RegisterType(tc.spec); !errors.Is(err, host.ErrBadRequest) {
				t.Fatalf("RegisterType = %v, want ErrBadRequest", err)
			}
			if slices.Contains(h.Types().Registered, "t") {
				t.Fatalf("a refused spec registered its type: %v", h.Types())
			}
		})
	}
	spec := host.TypeSpec{Name: "t", Factory: nopFactory, Verbs: []string{"go", "notice"}, Internal: []string{"notice"},
		StatusDetail: detail, Version: &host.TypeVersion{Version: "v2", Policy: fiber.VersionPolicy("")}}
	if err := h.RegisterType(spec); err != nil {
		t.Fatalf("RegisterType: %v", err)
	}
	if got := h.VersionOf("t").Version; got != "v2" {
		t.Fatalf("VersionOf = %q, want v2", got)
	}
	if err := h.RegisterType(spec); !errors.Is(err, host.ErrConflict) {
		t.Fatalf("second RegisterType = %v, want ErrConflict", err)
	}
	// The calls of before still work, in order, as wrappers.
	if err := h.Register("u", nopFactory, "go"); err != nil {
		t.Fatalf("Register: %v", err)
	}
	if err := h.SetStatusDetail("u", detail); err != nil {
		t.Fatalf("SetStatusDetail: %v", err)
	}
	if err := h.SetStatusDetail("nobody", detail); !errors.Is(err, host.ErrBadRequest) {
		t.Fatalf("SetStatusDetail of no type = %v, want ErrBadRequest", err)
	}
}
