package agentd

import "testing"

func TestRedactURL(t *testing.T) {
	tests := []struct{ in, want string }{
		{"nats://127.0.0.1:4222", "nats://127.0.0.1:4222"},
		{"nats://u:secret@h:4222", "nats://u:xxxxx@h:4222"},
		{"nats://tok@h:4222,nats://h2:4222", "nats://xxxxx@h:4222,nats://h2:4222"},
	}
	for _, tt := range tests {
		if got := redactURL(tt.in); got != tt.want {
			t.Errorf("redactURL(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
