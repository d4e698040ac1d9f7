package blob

import (
	"context"
	"sync"

	"github.com/nats-io/nats.go/jetstream"
)

// Reader reads objects of a bucket that another process creates (agentd):
// it binds the bucket on its first Get and again after a Get found none,
// so it can be made before anything was stored by reference. It is safe
// for concurrent use.
type Reader struct {
	js     jetstream.JetStream
	bucket string

	mu sync.Mutex
	st *Store
}

// NewReader returns a Reader of bucket (Bucket when empty) through js.
func NewReader(js jetstream.JetStream, bucket string) *Reader {
	if bucket == "" {
		bucket = Bucket
	}
	return &Reader{js: js, bucket: bucket}
}

// Get returns the bytes r names, checked against its size and digest
// (Store.Get). A bucket that does not exist is an error wrapping
// ErrNoBucket.
func (rd *Reader) Get(ctx context.Context, r Ref) ([]byte, error) {
	rd.mu.Lock()
	st := rd.st
	if st == nil {
		var err error
		if st, err = Bind(ctx, rd.js, rd.bucket); err != nil {
			rd.mu.Unlock()
			return nil, err
		}
		rd.st = st
	}
	rd.mu.Unlock()
	return st.Get(ctx, r)
}
