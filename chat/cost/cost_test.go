package cost_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/forever-agents/forever/chat/cost"
)

func TestMicrosText(t *testing.T) {
	for _, tc := range []struct {
		name string
		text string
		m    cost.Micros
		out  string
	}{
		{name: "cents", text: "1.50", m: 1_500_000, out: "1.50"},
		{name: "whole", text: "2", m: 2_000_000, out: "2.00"},
		{name: "micro", text: "0.000001", m: 1, out: "0.000001"},
		{name: "fraction only", text: ".5", m: 500_000, out: "0.50"},
		{name: "trailing zeros", text: "0.000120", m: 120, out: "0.00012"},
		{name: "zero", text: "0", m: 0, out: "0.00"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := cost.ParseMicros(tc.text)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := m, tc.m; got != want {
				t.Fatalf("ParseMicros(%q) = %d, want %d", tc.text, got, want)
			}
			if got, want := m.String(), tc.out; got != want {
				t.Fatalf("String = %q, want %q", got, want)
			}
			b, _ := json.Marshal(m)
			var back cost.Micros
			if err := json.Unmarshal(b, &back); err != nil || back != m {
				t.Fatalf("JSON round trip of %s: %d, %v", b, back, err)
			}
		})
	}
	for _, bad := range []string{"", ".", "-1", "1e3", "1.0000001", "abc", "99999999999"} {
		if _, err := cost.ParseMicros(bad); !errors.Is(err, cost.ErrAmount) {
			t.Errorf("ParseMicros(%q) = %v, want ErrAmount", bad, err)
		}
	}
}

// TestSumsDoNotDrift: a million calls of a micro-dollar sum to a dollar
// exactly, where float64 dollars would not.
func TestSumsDoNotDrift(t *testing.T) {
	var sum cost.Micros
	var f float64
	for range 1_000_000 {
		sum += 1
		f += 0.000001
	}
	if got, want := sum.String(), "1.00"; got != want {
		t.Fatalf("sum = %s, want %s", got, want)
	}
	if f == 1 {
		t.Log("float64 happened to be exact")
	}
}

func TestPriceOf(t *testing.T) {
	p := cost.Price{Input: 2_500_000, Output: 10_000_000, Cached: 1_250_000} // gpt-4o
	if got, want := p.Of(1000, 500, 0), cost.Micros(2500+5000); got != want {
		t.Fatalf("Of = %d, want %d", got, want)
	}
	if got, want := p.Of(1000, 0, 400), cost.Micros(1500+500); got != want {
		t.Fatalf("Of with cached = %d, want %d", got, want)
	}
	if got, want := (cost.Price{Input: 1_000_000}).Of(1, 0, 0), cost.Micros(1); got != want {
		t.Fatalf("one token at $1/M = %d, want %d", got, want)
	}
}

func TestLookup(t *testing.T) {
	tab := cost.Default()
	for _, tc := range []struct {
		name, provider, model string
		want                  cost.Price
		ok                    bool
	}{
		{name: "exact", provider: "openai", model: "gpt-4o", want: tab["openai"]["gpt-4o"], ok: true},
		{name: "snapshot", provider: "openai", model: "gpt-4o-2024-08-06", want: tab["openai"]["gpt-4o"], ok: true},
		{name: "longest prefix", provider: "openai", model: "gpt-4o-mini-2024-07-18", want: tab["openai"]["gpt-4o-mini"], ok: true},
		{name: "anthropic dated", provider: "anthropic", model: "claude-sonnet-4-20250514", want: tab["anthropic"]["claude-sonnet-4"], ok: true},
		{name: "chat completions as openai", provider: "chatcompletions", model: "gpt-4.1", want: tab["openai"]["gpt-4.1"], ok: true},
		{name: "local any model", provider: "local", model: "", want: tab["local"]["*"], ok: true},
		{name: "unknown", provider: "openai", model: "llama3", ok: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := tab.Lookup(tc.provider, tc.model)
			if got != tc.want || ok != tc.ok {
				t.Fatalf("Lookup(%s, %s) = %+v, %v; want %+v, %v", tc.provider, tc.model, got, ok, tc.want, tc.ok)
			}
		})
	}
}

func TestLoad(t *testing.T) {
	path := filepath.Join(t.TempDir(), "prices.json")
	if err := os.WriteFile(path, []byte(`{"local":{"*":{"input":"0","output":"0"}},"chatcompletions":{"llama3":{"input":"0.20","output":"0.20"}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	tab, err := cost.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if p, _ := tab.Lookup("local", ""); p != (cost.Price{}) {
		t.Fatalf("local = %+v, want free", p)
	}
	if p, ok := tab.Lookup("chatcompletions", "llama3:8b"); ok {
		t.Fatalf("llama3:8b matched %+v: a prefix needs a dash", p)
	}
	if p, _ := tab.Lookup("chatcompletions", "llama3"); p.Input != 200_000 {
		t.Fatalf("llama3 = %+v", p)
	}
	if _, ok := tab.Lookup("openai", "gpt-4o"); !ok {
		t.Fatal("the defaults are gone after an override")
	}
	for _, bad := range []string{`{"openai":{"x":{"input":"-1"}}}`, `{"openai":{"x":{"inpt":"1"}}}`, `[`} {
		if err := os.WriteFile(path, []byte(bad), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := cost.Load(path); err == nil {
			t.Errorf("Load(%s) = nil error", bad)
		}
	}
}
