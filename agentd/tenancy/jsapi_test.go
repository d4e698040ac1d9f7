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

// TestCheckStream: the forwarder lets a client's calls through on the
// log's chunks streams, unsharded or a shard's, and refuses them on any
// other stream (the events streams, agentd's buckets, a name that only
// starts like a shard's) and any call naming no stream but the account's
// INFO: the client's permissions name the stream with a wildcard.
func TestCheckStream(t *testing.T) {
	for _, c := range []struct {
		rest    string
		refused bool
	}{
		{"INFO", false},
		{"STREAM.INFO.FOREVER_CHUNKS", false},
		{"STREAM.INFO.FOREVER_CHUNKS_0", false},
		{"STREAM.INFO.FOREVER_CHUNKS_7", false},
		{"CONSUMER.CREATE.FOREVER_CHUNKS_3.c1.forever.chunk.5.a.s", false},
		{"CONSUMER.MSG.NEXT.FOREVER_CHUNKS_3.c1", false},
		{"DIRECT.GET.FOREVER_CHUNKS_3.forever.chunk.5.a.s", false},
		{"DIRECT.GET.FOREVER_CHUNKS_3", false},
		{"STREAM.MSG.GET.FOREVER_CHUNKS_1", false},
		{"CONSUMER.DELETE.FOREVER_CHUNKS_1.c1", false},
		{"STREAM.INFO.FOREVER_EVENTS", true},
		{"STREAM.INFO.FOREVER_EVENTS_0", true},
		{"CONSUMER.MSG.NEXT.FOREVER_EVENTS_2.views", true},
		{"DIRECT.GET.KV_forever-partitions", true},
		{"STREAM.INFO.FOREVER_CHUNKS_", true},
		{"STREAM.INFO.FOREVER_CHUNKS_01", true},
		{"STREAM.INFO.FOREVER_CHUNKS_-1", true},
		{"STREAM.INFO.FOREVER_CHUNKSX", true},
		{"STREAM.DELETE.FOREVER_CHUNKS", true},
		{"STREAM.LIST", true},
	} {
		err := checkStream("FOREVER_CHUNKS", c.rest)
		var se *errStreamRefused
		if got := errors.As(err, &se); got != c.refused {
			t.Errorf("checkStream(%s) = %v, refused %v, want %v", c.rest, err, got, c.refused)
		}
	}
}
