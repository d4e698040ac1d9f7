package tenancy

import (
	"errors"
	"testing"
)

// TestCheckConsumer: the forwarder lets a client create the ephemeral pull
// consumers an ordered consumer needs, and refuses a durable one (by name
// or by call), a push one (a deliver subject) and an acked one (its acks'
// reply subjects are published on by the server), saying why.
func TestCheckConsumer(t *testing.T) {
	for _, c := range []struct {
		name, rest, data string
		refused          bool
	}{
		{"ordered", "CONSUMER.CREATE.FOREVER_CHUNKS.c1.forever.chunk.a.s", `{"stream_name":"FOREVER_CHUNKS","config":{"name":"c1","deliver_policy":"all","ack_policy":"none","inactive_threshold":300000000000}}`, false},
		{"explicit ack", "CONSUMER.CREATE.FOREVER_CHUNKS.c1", `{"config":{"ack_policy":"explicit"}}`, true},
		{"no ack policy", "CONSUMER.CREATE.FOREVER_CHUNKS.c1", `{"config":{"name":"c1"}}`, true},
		{"durable name", "CONSUMER.CREATE.FOREVER_CHUNKS.c1.forever.chunk.a.s", `{"config":{"durable_name":"c1"}}`, true},
		{"deliver subject", "CONSUMER.CREATE.FOREVER_CHUNKS.c1", `{"config":{"deliver_subject":"forever.evt.a"}}`, true},
		{"kept an hour", "CONSUMER.CREATE.FOREVER_CHUNKS.c1", `{"config":{"inactive_threshold":3600000000000}}`, true},
		{"durable call", "CONSUMER.DURABLE.CREATE.FOREVER_CHUNKS.c1", `{"config":{}}`, true},
		{"not json", "CONSUMER.CREATE.FOREVER_CHUNKS.c1", `{`, false},
		{"info", "CONSUMER.INFO.FOREVER_CHUNKS.c1", `{"config":{"durable_name":"c1"}}`, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := checkConsumer(c.rest, []byte(c.data))
			var ce *errConsumerRefused
			if got := errors.As(err, &ce); got != c.refused {
				t.Fatalf("checkConsumer = %v, refused %v, want %v", err, got, c.refused)
			}
		})
	}
}
