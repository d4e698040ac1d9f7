package chat

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// weatherIn is a tool input with json and jsonschema tags.
type weatherIn struct {
	City  string   `json:"city" jsonschema:"the city, in English"`
	Days  int      `json:"days,omitempty" jsonschema:"days of forecast"`
	Units string   `json:"units,omitempty"`
	Tags  []string `json:"tags,omitempty"`
}

// weatherOut is a tool output.
type weatherOut struct {
	City  string  `json:"city"`
	TempC float64 `json:"tempC"`
	Days  int     `json:"days"`
}

// weatherFn echoes its input as a forecast.
func weatherFn(_ context.Context, in weatherIn) (weatherOut, error) {
	return weatherOut{City: in.City, TempC: 21.5, Days: in.Days}, nil
}

// asToolError returns err as a *ToolError or fails the test.
func asToolError(t *testing.T, err error) *ToolError {
	t.Helper()
	var te *ToolError
	if !errors.As(err, &te) {
		t.Fatalf("err = %v (%T), want a *ToolError", err, err)
	}
	return te
}

// fastRetry is a retry policy with waits too short to matter.
func fastRetry(attempts int) RetryPolicy {
	return RetryPolicy{InitialInterval: time.Millisecond, MaximumInterval: time.Millisecond, MaximumAttempts: attempts}
}

func TestToolSchemaFromStruct(t *testing.T) {
	tool, err := NewTool("get_weather", "Forecast for a city.", weatherFn)
	if err != nil {
		t.Fatal(err)
	}
	def := tool.Def()
	if got, want := def.Name, "get_weather"; got != want {
		t.Errorf("name = %q, want %q", got, want)
	}
	if got, want := def.Description, "Forecast for a city."; got != want {
		t.Errorf("description = %q, want %q", got, want)
	}
	var s struct {
		Type       string `json:"type"`
		Properties map[string]struct {
			Type        any    `json:"type"`
			Description string `json:"description"`
		} `json:"properties"`
		Required             []string `json:"required"`
		AdditionalProperties *bool    `json:"additionalProperties"`
	}
	if err := json.Unmarshal(def.Schema, &s); err != nil {
		t.Fatalf("schema %s: %v", def.Schema, err)
	}
	if got, want := s.Type, "object"; got != want {
		t.Errorf("type = %q, want %q", got, want)
	}
	var names []string
	for n := range s.Properties {
		names = append(names, n)
	}
	slices.Sort(names)
	if got, want := names, []string{"city", "days", "tags", "units"}; !slices.Equal(got, want) {
		t.Errorf("properties = %v, want %v", got, want)
	}
	if got, want := s.Properties["city"].Description, "the city, in English"; got != want {
		t.Errorf("city description = %q, want %q", got, want)
	}
	if got, want := s.Properties["days"].Type, any("integer"); got != want {
		t.Errorf("days type = %v, want %v", got, want)
	}
	if got, want := s.Required, []string{"city"}; !slices.Equal(got, want) {
		t.Errorf("required = %v, want %v", got, want)
	}
	if s.AdditionalProperties == nil || *s.AdditionalProperties {
		t.Errorf("additionalProperties = %v, want false", s.AdditionalProperties)
	}

	// The schema is the same every time: turns store it.
	again := MustTool("get_weather", "Forecast for a city.", weatherFn)
	if got, want := string(again.Def().Schema), string(def.Schema); got != want {
		t.Errorf("schema not stable:\n%s\n%s", got, want)
	}
}

func TestToolInputSchemaKinds(t *testing.T) {
	noop := func(context.Context, any) (any, error) { return nil, nil }
	ptr, err := NewTool("ptr", "", func(_ context.Context, in *weatherIn) (string, error) { return in.City, nil })
	if err != nil {
		t.Fatal(err)
	}
	if out, err := ptr.call(t.Context(), json.RawMessage(`{"city":"Oslo"}`)); err != nil || string(out) != `"Oslo"` {
		t.Errorf("pointer input: %s, %v", out, err)
	}
	m, err := NewTool("m", "", func(_ context.Context, in map[string]int) (int, error) { return in["a"] + in["b"], nil })
	if err != nil {
		t.Fatal(err)
	}
	if out, err := m.call(t.Context(), json.RawMessage(`{"a":1,"b":2}`)); err != nil || string(out) != `3` {
		t.Errorf("map input: %s, %v", out, err)
	}
	anyTool, err := NewTool("any", "", noop)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(anyTool.Def().Schema), `{"type":"object"}`; got != want {
		t.Errorf("schema of any = %s, want %s", got, want)
	}
}

func TestNewToolBadInputType(t *testing.T) {
	for _, tc := range []struct {
		name string
		make func(name string) (*Tool, error)
	}{
		{"chan", func(n string) (*Tool, error) {
			return NewTool(n, "", func(context.Context, chan int) (int, error) { return 0, nil })
		}},
		{"func", func(n string) (*Tool, error) {
			return NewTool(n, "", func(context.Context, func()) (int, error) { return 0, nil })
		}},
		{"string", func(n string) (*Tool, error) {
			return NewTool(n, "", func(context.Context, string) (int, error) { return 0, nil })
		}},
		{"slice", func(n string) (*Tool, error) {
			return NewTool(n, "", func(context.Context, []int) (int, error) { return 0, nil })
		}},
		{"chan_field", func(n string) (*Tool, error) {
			return NewTool(n, "", func(context.Context, struct{ C chan int }) (int, error) { return 0, nil })
		}},
		{"int_keys", func(n string) (*Tool, error) {
			return NewTool(n, "", func(context.Context, map[int]string) (int, error) { return 0, nil })
		}},
		{"nil_fn", func(n string) (*Tool, error) {
			return NewTool[weatherIn, weatherOut](n, "", nil)
		}},
		{"raw_array_schema", func(n string) (*Tool, error) {
			return NewRawTool(n, "", json.RawMessage(`{"type":"array"}`), rawEcho)
		}},
		{"raw_untyped_schema", func(n string) (*Tool, error) {
			return NewRawTool(n, "", json.RawMessage(`{"properties":{}}`), rawEcho)
		}},
		{"raw_not_json", func(n string) (*Tool, error) {
			return NewRawTool(n, "", json.RawMessage(`{"type":`), rawEcho)
		}},
		{"raw_remote_ref", func(n string) (*Tool, error) {
			return NewRawTool(n, "", json.RawMessage(`{"type":"object","properties":{"a":{"$ref":"https://example.com/a.json"}}}`), rawEcho)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := "bad_" + tc.name
			tool, err := tc.make(name)
			if !errors.Is(err, ErrInvalidTool) {
				t.Fatalf("err = %v, want ErrInvalidTool", err)
			}
			if tool != nil {
				t.Errorf("tool = %v, want nil", tool)
			}
			if !strings.Contains(err.Error(), name) {
				t.Errorf("error %q does not name the tool", err)
			}
		})
	}
	defer func() {
		if r := recover(); r == nil {
			t.Error("MustTool did not panic for a chan input")
		}
	}()
	MustTool("bad", "", func(context.Context, chan int) (int, error) { return 0, nil })
}

func TestToolBadOptions(t *testing.T) {
	for _, tc := range []struct {
		name string
		opt  ToolOption
	}{
		{"negative_timeout", WithTimeout(-time.Second)},
		{"negative_max_output", WithMaxOutput(-1)},
		{"unknown_safety", WithSafety(7)},
		{"small_coefficient", WithRetry(RetryPolicy{BackoffCoefficient: 0.5})},
		{"negative_attempts", WithRetry(RetryPolicy{MaximumAttempts: -1})},
		{"negative_interval", WithRetry(RetryPolicy{InitialInterval: -time.Second})},
		{"max_below_initial", WithRetry(RetryPolicy{InitialInterval: time.Minute, MaximumInterval: time.Second})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := NewTool("t", "", weatherFn, tc.opt); !errors.Is(err, ErrInvalidTool) {
				t.Fatalf("err = %v, want ErrInvalidTool", err)
			}
		})
	}
}

func TestToolNames(t *testing.T) {
	for _, name := range []string{"a", "srv__tool", "get-weather", "Tool_2", strings.Repeat("x", 64)} {
		if _, err := NewTool(name, "", weatherFn); err != nil {
			t.Errorf("NewTool(%q) = %v, want no error", name, err)
		}
	}
	for _, name := range []string{"", strings.Repeat("x", 65), "a.b", "a b", "a/b", "tööl", "srv:tool"} {
		if _, err := NewTool(name, "", weatherFn); !errors.Is(err, ErrInvalidTool) {
			t.Errorf("NewTool(%q) = %v, want ErrInvalidTool", name, err)
		}
		if _, err := NewRawTool(name, "", nil, rawEcho); !errors.Is(err, ErrInvalidTool) {
			t.Errorf("NewRawTool(%q) = %v, want ErrInvalidTool", name, err)
		}
	}
}

func TestToolInvalidInputNotRun(t *testing.T) {
	var runs atomic.Int32
	tool := MustTool("get_weather", "", func(ctx context.Context, in weatherIn) (weatherOut, error) {
		runs.Add(1)
		return weatherFn(ctx, in)
	})
	for _, tc := range []struct{ name, input string }{
		{"wrong_type", `{"city":"Oslo","days":"two"}`},
		{"fraction_for_integer", `{"city":"Oslo","days":2.5}`},
		{"missing_required", `{"days":2}`},
		{"unknown_property", `{"city":"Oslo","country":"NO"}`},
		{"array", `["Oslo"]`},
		{"string", `"Oslo"`},
		{"not_json", `{"city":`},
		{"empty_means_no_city", ``},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tool.call(t.Context(), json.RawMessage(tc.input))
			te := asToolError(t, err)
			if got, want := te.Type, "invalid_input"; got != want {
				t.Errorf("type = %q, want %q (%v)", got, want, te)
			}
			if te.Retryable {
				t.Error("invalid input is retryable")
			}
		})
	}
	if got := runs.Load(); got != 0 {
		t.Errorf("tool ran %d times on invalid input", got)
	}

	// No input at all is the empty object, valid where nothing is required.
	noArgs := MustTool("now", "", func(context.Context, struct{}) (string, error) { return "noon", nil })
	for _, input := range []string{``, `null`, ` {} `} {
		if out, err := noArgs.call(t.Context(), json.RawMessage(input)); err != nil || string(out) != `"noon"` {
			t.Errorf("input %q: %s, %v", input, out, err)
		}
	}
}

func TestToolRoundTrip(t *testing.T) {
	tool := MustTool("get_weather", "", weatherFn)
	out, err := tool.call(t.Context(), json.RawMessage(`{"city":"Oslo","days":3,"tags":["a"]}`))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(out), `{"city":"Oslo","tempC":21.5,"days":3}`; got != want {
		t.Errorf("output = %s, want %s", got, want)
	}
}

func TestToolRaw(t *testing.T) {
	schema := json.RawMessage(`{
		"type": "object",
		"properties": {"q": {"type": "string"}},
		"required": ["q"]
	}`)
	var seen json.RawMessage
	tool, err := NewRawTool("srv__search", "Search.", schema, func(_ context.Context, in json.RawMessage) (json.RawMessage, error) {
		seen = in
		return json.RawMessage(`{"hits":1}`), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(tool.Def().Schema), `{"type":"object","properties":{"q":{"type":"string"}},"required":["q"]}`; got != want {
		t.Errorf("schema = %s, want %s", got, want)
	}
	out, err := tool.call(t.Context(), json.RawMessage(`{"q":"go","extra":true}`))
	if err != nil || string(out) != `{"hits":1}` {
		t.Fatalf("call = %s, %v", out, err)
	}
	if got, want := string(seen), `{"q":"go","extra":true}`; got != want {
		t.Errorf("fn got %s, want %s", got, want)
	}
	if _, err := tool.call(t.Context(), json.RawMessage(`{"q":1}`)); asToolError(t, err).Type != "invalid_input" {
		t.Errorf("q of the wrong type: %v", err)
	}

	empty := func(context.Context, json.RawMessage) (json.RawMessage, error) { return nil, nil }
	if out, err := mustRaw(t, "empty", empty).call(t.Context(), nil); err != nil || string(out) != `null` {
		t.Errorf("empty output = %s, %v, want null", out, err)
	}
	bad := func(context.Context, json.RawMessage) (json.RawMessage, error) { return json.RawMessage(`{`), nil }
	if _, err := mustRaw(t, "bad", bad).call(t.Context(), nil); asToolError(t, err).Type != "invalid_output" {
		t.Errorf("output that is not JSON: %v", err)
	}
}

// rawEcho is a raw tool function returning its input.
func rawEcho(_ context.Context, in json.RawMessage) (json.RawMessage, error) { return in, nil }

// mustRaw makes a raw tool taking any object, or fails the test.
func mustRaw(t *testing.T, name string, fn func(context.Context, json.RawMessage) (json.RawMessage, error), opts ...ToolOption) *Tool {
	t.Helper()
	tool, err := NewRawTool(name, "", nil, fn, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return tool
}

func TestToolTimeoutThenRetry(t *testing.T) {
	var attempts []int
	tool := MustTool("flaky", "", func(ctx context.Context, in struct{}) (string, error) {
		c, _ := ToolCallFrom(ctx)
		attempts = append(attempts, c.Attempt)
		if c.Attempt == 1 {
			<-ctx.Done() // hangs until the attempt times out
			return "", ctx.Err()
		}
		return "ok", nil
	}, WithSafety(Idempotent), WithTimeout(10*time.Millisecond), WithRetry(fastRetry(3)))
	out, err := tool.call(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(out), `"ok"`; got != want {
		t.Errorf("output = %s, want %s", got, want)
	}
	if got, want := attempts, []int{1, 2}; !slices.Equal(got, want) {
		t.Errorf("attempts = %v, want %v", got, want)
	}
}

func TestToolTimeoutOfUnsafeToolNotRetried(t *testing.T) {
	var runs atomic.Int32
	tool := MustTool("pay", "", func(ctx context.Context, in struct{}) (string, error) {
		runs.Add(1)
		<-ctx.Done()
		return "", fmt.Errorf("charge: %w", ctx.Err())
	}, WithTimeout(10*time.Millisecond), WithRetry(fastRetry(3)))
	_, err := tool.call(t.Context(), nil)
	te := asToolError(t, err)
	if got, want := te.Type, "timeout"; got != want {
		t.Errorf("type = %q, want %q", got, want)
	}
	if te.Retryable || !strings.Contains(te.Message, "unknown") {
		t.Errorf("timeout of an unsafe tool = %+v, want final and its outcome unknown", te)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("err = %v, want it to wrap the deadline", err)
	}
	if got := runs.Load(); got != 1 {
		t.Errorf("ran %d times, want 1", got)
	}
}

func TestToolRetryExhausted(t *testing.T) {
	busy := errors.New("backend busy")
	var runs atomic.Int32
	tool := MustTool("busy", "", func(context.Context, struct{}) (int, error) {
		runs.Add(1)
		return 0, RetryableError(busy)
	}, WithRetry(fastRetry(3)))
	_, err := tool.call(t.Context(), nil)
	te := asToolError(t, err)
	if got, want := te.Type, "error"; got != want {
		t.Errorf("type = %q, want %q", got, want)
	}
	if !errors.Is(err, busy) {
		t.Errorf("err = %v, want it to wrap %v", err, busy)
	}
	if got, want := runs.Load(), int32(3); got != want {
		t.Errorf("ran %d times, want %d", got, want)
	}
}

func TestToolNonRetryableNotRetried(t *testing.T) {
	for _, tc := range []struct {
		name   string
		err    error
		policy RetryPolicy
		want   string
	}{
		{"plain_error", errors.New("no such city"), fastRetry(5), "error"},
		{"final_tool_error", &ToolError{Type: "not_found", Message: "no such city"}, fastRetry(5), "not_found"},
		{"listed_type", &ToolError{Type: "quota", Message: "over quota", Retryable: true},
			RetryPolicy{InitialInterval: time.Millisecond, MaximumAttempts: 5, NonRetryableErrorTypes: []string{"quota"}}, "quota"},
		{"default_policy", RetryableError(errors.New("busy")), RetryPolicy{}, "error"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var runs atomic.Int32
			tool := MustTool("t", "", func(context.Context, struct{}) (int, error) {
				runs.Add(1)
				return 0, tc.err
			}, WithRetry(tc.policy))
			_, err := tool.call(t.Context(), nil)
			if got := asToolError(t, err).Type; got != tc.want {
				t.Errorf("type = %q, want %q", got, tc.want)
			}
			if got := runs.Load(); got != 1 {
				t.Errorf("ran %d times, want 1", got)
			}
		})
	}
}

func TestToolErrorPassedAsIs(t *testing.T) {
	want := &ToolError{Type: "not_found", Message: "no such city"}
	tool := MustTool("t", "", func(context.Context, struct{}) (int, error) { return 0, want })
	_, err := tool.call(t.Context(), nil)
	if err != want {
		t.Errorf("err = %#v, want the tool's own %#v", err, want)
	}
	if got, want := err.Error(), "not_found: no such city"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
}

func TestToolPanic(t *testing.T) {
	tool := MustTool("t", "", func(context.Context, struct{}) (int, error) { panic("boom") })
	_, err := tool.call(t.Context(), nil)
	te := asToolError(t, err)
	if te.Type != "panic" || !strings.Contains(te.Message, "boom") || te.Retryable {
		t.Errorf("panic = %+v", te)
	}
}

func TestToolOutputTooLarge(t *testing.T) {
	tool := MustTool("big", "", func(_ context.Context, in struct {
		N int `json:"n"`
	}) (string, error) {
		return strings.Repeat("x", in.N), nil
	}, WithMaxOutput(10))
	if out, err := tool.call(t.Context(), json.RawMessage(`{"n":8}`)); err != nil || len(out) != 10 {
		t.Errorf("output at the limit: %s, %v", out, err)
	}
	_, err := tool.call(t.Context(), json.RawMessage(`{"n":20}`))
	te := asToolError(t, err)
	if got, want := te.Type, "output_too_large"; got != want {
		t.Errorf("type = %q, want %q", got, want)
	}
	if !strings.Contains(te.Message, "22") || !strings.Contains(te.Message, "10") {
		t.Errorf("message %q does not name both sizes (22 and 10)", te.Message)
	}
	if te.Retryable {
		t.Error("output too large is retryable")
	}
}

func TestToolCallFromInFn(t *testing.T) {
	var got ToolCall
	var ok bool
	tool := MustTool("who", "", func(ctx context.Context, in struct{}) (string, error) {
		got, ok = ToolCallFrom(ctx)
		return "", nil
	})
	ctx := withToolCall(t.Context(), ToolCall{Agent: "a1", RequestID: "r1", CallID: "call_1", ToolName: "who"})
	if _, err := tool.call(ctx, nil); err != nil {
		t.Fatal(err)
	}
	want := ToolCall{Agent: "a1", RequestID: "r1", CallID: "call_1", ToolName: "who",
		IdempotencyKey: ToolIdempotencyKey("a1", "r1", "call_1"), Attempt: 1}
	if !ok || got != want {
		t.Errorf("ToolCallFrom = %+v, %v; want %+v", got, ok, want)
	}
	if _, ok := ToolCallFrom(t.Context()); ok {
		t.Error("ToolCallFrom found a call in a plain ctx")
	}
}

func TestToolIdempotencyKey(t *testing.T) {
	k := ToolIdempotencyKey("a1", "r1", "call_1")
	// The key is stored by tools outside this process: its derivation must
	// not change.
	if got, want := k, "960e02907c3ced64ae4271c2cdb48739"; got != want {
		t.Errorf("key = %s, want %s", got, want)
	}
	if got := ToolIdempotencyKey("a1", "r1", "call_1"); got != k {
		t.Errorf("key changed: %s then %s", k, got)
	}
	for _, other := range [][3]string{
		{"a2", "r1", "call_1"}, {"a1", "r2", "call_1"}, {"a1", "r1", "call_2"},
		{"a1r1", "", "call_1"}, {"a", "1r1", "call_1"},
	} {
		if ToolIdempotencyKey(other[0], other[1], other[2]) == k {
			t.Errorf("%q has the same key as a1/r1/call_1", other)
		}
	}
	if ToolIdempotencyKey("a1", "r1", "call_1") == IdempotencyKey("r1", 1) {
		t.Error("tool key equals a provider key")
	}
}

func TestToolParentCancel(t *testing.T) {
	t.Run("during_attempt", func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		tool := MustTool("slow", "", func(ctx context.Context, in struct{}) (int, error) {
			cancel() // shutdown while the tool runs
			<-ctx.Done()
			return 0, &ToolError{Type: "aborted", Message: "stopped", Err: ctx.Err()}
		}, WithSafety(Idempotent), WithRetry(fastRetry(3)))
		_, err := tool.call(ctx, nil)
		if err != context.Canceled {
			t.Fatalf("err = %v (%T), want context.Canceled itself", err, err)
		}
	})
	t.Run("during_backoff", func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		var runs atomic.Int32
		tool := MustTool("busy", "", func(context.Context, struct{}) (int, error) {
			runs.Add(1)
			go cancel()
			return 0, RetryableError(errors.New("busy"))
		}, WithRetry(RetryPolicy{InitialInterval: time.Hour, MaximumAttempts: 3}))
		_, err := tool.call(ctx, nil)
		var te *ToolError
		if !errors.Is(err, context.Canceled) || errors.As(err, &te) {
			t.Fatalf("err = %v (%T), want context.Canceled and no ToolError", err, err)
		}
		if got := runs.Load(); got != 1 {
			t.Errorf("ran %d times, want 1", got)
		}
	})
	t.Run("before_call", func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		var runs atomic.Int32
		tool := MustTool("t", "", func(context.Context, struct{}) (int, error) { runs.Add(1); return 1, nil })
		if _, err := tool.call(ctx, nil); err != context.Canceled {
			t.Fatalf("err = %v, want context.Canceled", err)
		}
		if runs.Load() != 0 {
			t.Error("tool ran under a cancelled ctx")
		}
	})
}

func TestToolApproval(t *testing.T) {
	plain := MustTool("t", "", weatherFn)
	always := MustTool("t", "", weatherFn, AlwaysNeedsApproval())
	byInput := MustTool("t", "", weatherFn, WithApproval(func(in json.RawMessage) bool {
		var w weatherIn
		return json.Unmarshal(in, &w) != nil || w.Days > 7
	}))
	panicky := MustTool("t", "", weatherFn, WithApproval(func(json.RawMessage) bool { panic("bug") }))
	short, long := json.RawMessage(`{"city":"Oslo","days":2}`), json.RawMessage(`{"city":"Oslo","days":14}`)
	for _, tc := range []struct {
		name  string
		tool  *Tool
		input json.RawMessage
		want  bool
	}{
		{"default", plain, long, false},
		{"always", always, short, true},
		{"by_input_short", byInput, short, false},
		{"by_input_long", byInput, long, true},
		{"panicking_predicate", panicky, short, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.tool.needsApproval(tc.input); got != tc.want {
				t.Errorf("needsApproval = %v, want %v", got, tc.want)
			}
		})
	}
	if got, want := plain.Safety(), Unsafe; got != want {
		t.Errorf("default safety = %v, want %v", got, want)
	}
}

func TestNewTools(t *testing.T) {
	a := MustTool("alpha", "", weatherFn)
	b := MustTool("beta", "", weatherFn)
	c := MustTool("srv__gamma", "", weatherFn)
	ts, err := NewTools(c, a, b)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := ts.Len(), 3; got != want {
		t.Errorf("Len = %d, want %d", got, want)
	}
	var names []string
	for _, d := range ts.Defs() {
		names = append(names, d.Name)
	}
	if got, want := names, []string{"alpha", "beta", "srv__gamma"}; !slices.Equal(got, want) {
		t.Errorf("Defs names = %v, want %v", got, want)
	}
	if got, ok := ts.Lookup("beta"); !ok || got != b {
		t.Errorf("Lookup(beta) = %v, %v", got, ok)
	}
	if _, ok := ts.Lookup("delta"); ok {
		t.Error("Lookup(delta) found a tool")
	}

	dup := MustTool("beta", "another", weatherFn)
	if _, err := NewTools(a, b, dup); !errors.Is(err, ErrInvalidTool) || !strings.Contains(err.Error(), `"beta"`) {
		t.Errorf("duplicate: err = %v, want ErrInvalidTool naming beta", err)
	}
	if _, err := NewTools(a, nil); !errors.Is(err, ErrInvalidTool) {
		t.Errorf("nil tool: err = %v, want ErrInvalidTool", err)
	}
	if _, err := NewTools(&Tool{}); !errors.Is(err, ErrInvalidTool) {
		t.Errorf("zero Tool: err = %v, want ErrInvalidTool", err)
	}

	var none *Tools
	if none.Len() != 0 || none.Defs() != nil {
		t.Error("nil Tools is not empty")
	}
	if _, ok := none.Lookup("alpha"); ok {
		t.Error("nil Tools found a tool")
	}
}

func TestRetryPolicyBackoff(t *testing.T) {
	p := RetryPolicy{InitialInterval: time.Second, MaximumInterval: 5 * time.Second, MaximumAttempts: 10}.withDefaults()
	var got []time.Duration
	for attempt := 1; attempt <= 5; attempt++ {
		got = append(got, p.backoff(attempt))
	}
	if want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 5 * time.Second, 5 * time.Second}; !slices.Equal(got, want) {
		t.Errorf("backoff = %v, want %v", got, want)
	}
	d := RetryPolicy{}.withDefaults()
	if d.InitialInterval != time.Second || d.BackoffCoefficient != 2 || d.MaximumInterval != 100*time.Second || d.MaximumAttempts != 1 {
		t.Errorf("defaults = %+v", d)
	}
}

func ExampleNewTool() {
	type forecastIn struct {
		City string `json:"city" jsonschema:"the city, in English"`
		Days int    `json:"days,omitempty" jsonschema:"days of forecast, 1 if omitted"`
	}
	forecast, err := NewTool("get_forecast", "Weather forecast for a city.",
		func(ctx context.Context, in forecastIn) (string, error) {
			return "sunny in " + in.City, nil
		},
		WithSafety(Idempotent), WithTimeout(10*time.Second),
		WithRetry(RetryPolicy{MaximumAttempts: 3}))
	if err != nil {
		fmt.Println(err)
		return
	}
	tools, err := NewTools(forecast)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, d := range tools.Defs() {
		fmt.Printf("%s: %s\n", d.Name, d.Schema)
	}
	// Output:
	// get_forecast: {"type":"object","properties":{"city":{"type":"string","description":"the city, in English"},"days":{"type":"integer","description":"days of forecast, 1 if omitted"}},"required":["city"],"additionalProperties":false}
}
