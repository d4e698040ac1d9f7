package replay

import (
	"net/http/httptest"
	"testing"
)

func TestWithMultitaskHeader(t *testing.T) {
	for _, tc := range []struct {
		name, header, body, want string
	}{
		{"no header", "", `{"id":"a"}`, `{"id":"a"}`},
		{"header", "enqueue", `{"id":"a"}`, `{"id":"a","multitask":"enqueue"}`},
		{"body wins", "enqueue", `{"id":"a","multitask":"interrupt"}`, `{"id":"a","multitask":"interrupt"}`},
		{"empty body field", "interrupt", `{"id":"a","multitask":""}`, `{"id":"a","multitask":"interrupt"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest("POST", "/v1/chat", nil)
			if tc.header != "" {
				r.Header.Set(HeaderMultitask, tc.header)
			}
			if got := string(withMultitaskHeader(r, []byte(tc.body))); got != tc.want {
				t.Fatalf("got %s, want %s", got, tc.want)
			}
		})
	}
}
