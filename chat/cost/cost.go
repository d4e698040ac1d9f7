// Package cost prices model usage: an amount of money in integer
// micro-dollars ([Micros], which sums without drift and reads as "1.50"),
// and a [Table] of prices per provider and model ([Price]: dollars per
// million input, output and cached input tokens), with defaults for the
// models Forever's providers reach and a JSON file that overrides them
// ([Load]).
package cost

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// ErrAmount is returned by ParseMicros (and Micros.UnmarshalJSON) for a
// text that is not an amount of dollars with at most six decimals.
var ErrAmount = errors.New("cost: not an amount of dollars")

// Micros is an amount of money in millionths of a dollar. Sums of Micros
// are exact; its JSON is a string of dollars ("1.50", "0.000120").
type Micros int64

// MaxMicros bounds what ParseMicros takes: a billion dollars.
const MaxMicros Micros = 1_000_000_000 * 1_000_000

// String returns m in dollars with at least two decimals and no trailing
// zeros past them: 1500000 is "1.50", 120 is "0.00012".
func (m Micros) String() string {
	neg := m < 0
	if neg {
		m = -m
	}
	s := fmt.Sprintf("%d.%06d", int64(m)/1_000_000, int64(m)%1_000_000)
	for strings.HasSuffix(s, "0") && len(s)-strings.IndexByte(s, '.') > 3 {
		s = s[:len(s)-1]
	}
	if neg {
		return "-" + s
	}
	return s
}

// ParseMicros reads an amount of dollars: digits with an optional
// fraction of at most six digits ("1.50", "2", "0.000001"); no sign, no
// exponent, at most MaxMicros.
func ParseMicros(s string) (Micros, error) {
	whole, frac, dot := strings.Cut(s, ".")
	if whole == "" && !dot || (dot && frac == "" && whole == "") || len(frac) > 6 {
		return 0, fmt.Errorf("%w: %q (write dollars like \"1.50\", at most six decimals)", ErrAmount, s)
	}
	for _, p := range []string{whole, frac} {
		for _, c := range p {
			if c < '0' || c > '9' {
				return 0, fmt.Errorf("%w: %q (write dollars like \"1.50\", at most six decimals)", ErrAmount, s)
			}
		}
	}
	if len(whole) > 10 {
		return 0, fmt.Errorf("%w: %q is more than %s", ErrAmount, s, MaxMicros)
	}
	var w, f int64
	if whole != "" {
		w, _ = strconv.ParseInt(whole, 10, 64)
	}
	if frac != "" {
		f, _ = strconv.ParseInt(frac+strings.Repeat("0", 6-len(frac)), 10, 64)
	}
	m := Micros(w*1_000_000 + f)
	if m > MaxMicros {
		return 0, fmt.Errorf("%w: %q is more than %s", ErrAmount, s, MaxMicros)
	}
	return m, nil
}

// MarshalJSON writes m as a string of dollars.
func (m Micros) MarshalJSON() ([]byte, error) { return strconv.AppendQuote(nil, m.String()), nil }

// UnmarshalJSON reads a string of dollars (or, leniently, a JSON number
// written as dollars).
func (m *Micros) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		var n json.Number
		if json.Unmarshal(b, &n) != nil {
			return fmt.Errorf("%w: %s", ErrAmount, b)
		}
		s = n.String()
	}
	v, err := ParseMicros(s)
	if err != nil {
		return err
	}
	*m = v
	return nil
}

// Price is what a model costs, in dollars per million tokens.
type Price struct {
	Input  Micros `json:"input"`
	Output Micros `json:"output"`
	// Cached is the price of input tokens read from the provider's prompt
	// cache, for providers that report them apart.
	Cached Micros `json:"cached"`
}

// Of returns the cost of a call's tokens at p, rounded to the nearest
// micro-dollar: input and output tokens (input including any cached
// ones), of which cached were read from the cache.
func (p Price) Of(input, output, cached int64) Micros {
	cached = min(max(cached, 0), input)
	n := (input-cached)*int64(p.Input) + cached*int64(p.Cached) + output*int64(p.Output)
	return Micros((n + 500_000) / 1_000_000)
}

// Table holds the prices per provider ("openai", "anthropic", "local",
// "chatcompletions") and model. A model key matches the model of that
// name and every model whose name starts with it followed by "-" (a dated
// snapshot: "gpt-4o" prices "gpt-4o-2024-08-06"); the longest key wins;
// the key "*" matches any model of the provider.
type Table map[string]map[string]Price

// usd returns dollars as Micros: usd(2, 50) is $2.50.
func usd(dollars, cents int64) Micros { return Micros(dollars*1_000_000 + cents*10_000) }

// Default returns the built-in prices (list prices in US dollars per
// million tokens when written; an operator overrides them with Load).
// The local model is priced at a nominal $1 input and $2 output per
// million tokens so that costs show, and budgets on cost can be tried,
// without a paid provider.
func Default() Table {
	return Table{
		"local": {"*": {Input: usd(1, 0), Output: usd(2, 0), Cached: usd(0, 10)}},
		"openai": {
			"gpt-5":        {Input: usd(1, 25), Output: usd(10, 0), Cached: 125_000},
			"gpt-5-mini":   {Input: usd(0, 25), Output: usd(2, 0), Cached: 25_000},
			"gpt-5-nano":   {Input: usd(0, 5), Output: usd(0, 40), Cached: 5_000},
			"gpt-4.1":      {Input: usd(2, 0), Output: usd(8, 0), Cached: usd(0, 50)},
			"gpt-4.1-mini": {Input: usd(0, 40), Output: usd(1, 60), Cached: usd(0, 10)},
			"gpt-4.1-nano": {Input: usd(0, 10), Output: usd(0, 40), Cached: 25_000},
			"gpt-4o":       {Input: usd(2, 50), Output: usd(10, 0), Cached: usd(1, 25)},
			"gpt-4o-mini":  {Input: 150_000, Output: usd(0, 60), Cached: 75_000},
			"o3":           {Input: usd(2, 0), Output: usd(8, 0), Cached: usd(0, 50)},
			"o4-mini":      {Input: usd(1, 10), Output: usd(4, 40), Cached: 275_000},
		},
		"anthropic": {
			"claude-opus-4-5":   {Input: usd(5, 0), Output: usd(25, 0), Cached: usd(0, 50)},
			"claude-opus-4-1":   {Input: usd(15, 0), Output: usd(75, 0), Cached: usd(1, 50)},
			"claude-opus-4":     {Input: usd(15, 0), Output: usd(75, 0), Cached: usd(1, 50)},
			"claude-sonnet-4-5": {Input: usd(3, 0), Output: usd(15, 0), Cached: usd(0, 30)},
			"claude-sonnet-4":   {Input: usd(3, 0), Output: usd(15, 0), Cached: usd(0, 30)},
			"claude-haiku-4-5":  {Input: usd(1, 0), Output: usd(5, 0), Cached: usd(0, 10)},
			"claude-3-7-sonnet": {Input: usd(3, 0), Output: usd(15, 0), Cached: usd(0, 30)},
			"claude-3-5-haiku":  {Input: usd(0, 80), Output: usd(4, 0), Cached: usd(0, 8)},
		},
	}
}

// Lookup returns the price of model at provider, and whether the table
// has one. A "chatcompletions" provider without an entry of its own is
// priced as "openai" (its models are OpenAI's when it talks to OpenAI).
func (t Table) Lookup(provider, model string) (Price, bool) {
	if p, ok := lookupIn(t[provider], model); ok {
		return p, true
	}
	if provider == "chatcompletions" {
		return lookupIn(t["openai"], model)
	}
	return Price{}, false
}

type models = map[string]Price

func lookupIn(m models, model string) (Price, bool) {
	if p, ok := m[model]; ok {
		return p, true
	}
	best, found := "", false
	for k := range m {
		if k != "*" && strings.HasPrefix(model, k+"-") && len(k) > len(best) {
			best, found = k, true
		}
	}
	if found {
		return m[best], true
	}
	p, ok := m["*"]
	return p, ok
}

// Merge returns a copy of t with over's prices set over its own, model by
// model.
func (t Table) Merge(over Table) Table {
	out := Table{}
	for _, src := range []Table{t, over} {
		for prov, ms := range src {
			if out[prov] == nil {
				out[prov] = models{}
			}
			for m, p := range ms {
				out[prov][m] = p
			}
		}
	}
	return out
}

// Parse reads a prices file: {"<provider>": {"<model>": {"input": "2.50",
// "output": "10.00", "cached": "1.25"}}}, dollars per million tokens.
func Parse(data []byte) (Table, error) {
	var t Table
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&t); err != nil {
		if errors.Is(err, ErrAmount) {
			return nil, err
		}
		return nil, fmt.Errorf("cost: want {\"<provider>\": {\"<model>\": {\"input\": \"2.50\", \"output\": \"10.00\", \"cached\": \"1.25\"}}} (dollars per million tokens): %s", jsonReason(err))
	}
	return t, nil
}

// jsonReason is the part of a decoding error a person reads, without Go
// type names.
func jsonReason(err error) string {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Sprintf("not JSON at byte %d", se.Offset)
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return fmt.Sprintf("field %q has the wrong kind of value", te.Field)
	}
	s := err.Error()
	if i := strings.Index(s, "unknown field"); i >= 0 {
		return s[i:]
	}
	return "not a prices object"
}

// Load returns the default prices with the file at path's set over them
// (Parse); an empty path is the defaults alone.
func Load(path string) (Table, error) {
	if path == "" {
		return Default(), nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("cost: read: %w", err)
	}
	t, err := Parse(data)
	if err != nil {
		return nil, err
	}
	return Default().Merge(t), nil
}
