package main

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
)

// TestPostTurnResumesCutStream: a post whose stream the gateway ends
// without [DONE] (its follow failed past its retries) is resumed from its
// last event id, and again when the resume is cut too, as the gateway's
// documented client does; a cut before any event resumes the agent's
// unfinished turn, whose 204 says it ended. Only a turn cut past
// resumeCuts times fails.
func TestPostTurnResumesCutStream(t *testing.T) {
	for _, c := range []struct {
		name    string
		post    string   // the post's events before the cut
		resumes []string // each resume's answer: events, "204", or "" for a cut
		after   []string // the ?after= each resume must send
		resumed int
		fail    bool
	}{
		{name: "cut after an event", post: "id: 7\ndata: {}\n\n",
			resumes: []string{"id: 8\ndata: {}\n\ndata: [DONE]\n\n"}, after: []string{"7"}, resumed: 1},
		{name: "the resume cut too", post: "id: 7\ndata: {}\n\n",
			resumes: []string{"id: 9\ndata: {}\n\n", "data: [DONE]\n\n"}, after: []string{"7", "9"}, resumed: 2},
		{name: "cut before any event", post: "",
			resumes: []string{"204"}, after: []string{""}, resumed: 1},
		{name: "cut past every resume", post: "id: 7\ndata: {}\n\n",
			resumes: []string{"", "", ""}, after: []string{"7", "7", "7"}, resumed: resumeCuts, fail: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			var mu sync.Mutex
			var after []string
			mux := http.NewServeMux()
			mux.HandleFunc("POST /v1/chat", func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/event-stream")
				fmt.Fprint(w, c.post) // and the response ends without [DONE]
			})
			mux.HandleFunc("GET /v1/chat/{id}/stream", func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				k := len(after)
				after = append(after, r.URL.Query().Get("after"))
				mu.Unlock()
				if k >= len(c.resumes) {
					http.Error(w, "resumed too often", http.StatusTeapot)
					return
				}
				if c.resumes[k] == "204" {
					w.WriteHeader(http.StatusNoContent)
					return
				}
				w.Header().Set("Content-Type", "text/event-stream")
				fmt.Fprint(w, c.resumes[k])
			})
			srv := httptest.NewServer(mux)
			defer srv.Close()
			resumed, err := postTurnResuming(t.Context(), srv.Client(), srv.URL, "scale-0", 1)
			var cut *cutStream
			if c.fail != errors.As(err, &cut) || (!c.fail && err != nil) {
				t.Fatalf("post: %v (fail %v)", err, c.fail)
			}
			mu.Lock()
			defer mu.Unlock()
			if resumed != c.resumed || fmt.Sprint(after) != fmt.Sprint(c.after) {
				t.Fatalf("resumed %d times after %q, want %d after %q", resumed, after, c.resumed, c.after)
			}
		})
	}
}
