package audit

import (
	"context"

	"github.com/nats-io/nats.go/jetstream"
)

// TailDelivered is Tail (without follow) with delivered seeing each
// record's metadata before the listing's end rule reads it: a test sets
// NumPending as a consumer on a replica behind the leader reports it.
func TailDelivered(ctx context.Context, js jetstream.JetStream, tenant string, n int, fn func(Record) error, delivered func(*jetstream.MsgMetadata)) error {
	return tail(ctx, js, tenant, n, false, fn, delivered)
}
