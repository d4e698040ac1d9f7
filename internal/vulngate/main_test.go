package main

import (
	"strings"
	"testing"
)

func TestJudge(t *testing.T) {
	in := `{"config":{"protocol_version":"v1.0.0"}}
{"osv":{"id":"GO-1"}}
{"finding":{"osv":"GO-1","fixed_version":"v1.2.3","trace":[{"module":"example.com/m","version":"v1.2.0"}]}}
{"finding":{"osv":"GO-2","fixed_version":"go1.26.9","trace":[{"module":"stdlib","version":"go1.26.8","package":"net/http","function":"Serve"}]}}
{"finding":{"osv":"GO-2","fixed_version":"go1.26.9","trace":[{"module":"stdlib","version":"go1.26.8"}]}}
{"finding":{"osv":"GO-3","fixed_version":"go1.26.10","trace":[{"module":"stdlib","version":"go1.26.8","package":"archive/zip"}]}}
`
	v, err := judge(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	// A module we require fails; so does a standard library function the
	// code calls. One it does not reach is a warning.
	if len(v.fail) != 2 || !strings.Contains(v.fail[0], "GO-1 in example.com/m@v1.2.0 (required, not called), fixed in v1.2.3") ||
		!strings.Contains(v.fail[1], "GO-2 in stdlib@go1.26.8 (called)") {
		t.Errorf("fail = %q", v.fail)
	}
	if len(v.warn) != 1 || !strings.Contains(v.warn[0], "GO-3 in stdlib@go1.26.8 (required, not called)") {
		t.Errorf("warn = %q", v.warn)
	}
	if _, err := judge(strings.NewReader("{not json")); err == nil {
		t.Error("bad input accepted")
	}
	v, err = judge(strings.NewReader(""))
	if err != nil || len(v.fail)+len(v.warn) != 0 {
		t.Errorf("empty: %+v %v", v, err)
	}
}
