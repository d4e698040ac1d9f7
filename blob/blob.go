package blob

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Bucket is the default Object Store bucket of the payloads.
const Bucket = "FOREVER_BLOBS"

// DefaultThreshold is the size above which a payload is stored by
// reference (256 KiB).
const DefaultThreshold = 256 << 10

// DigestPrefix starts every Ref.Digest.
const DigestPrefix = "sha256:"

// Errors of the package.
var (
	// ErrNotFound is returned by Get and Check for a reference whose object
	// is not in the bucket.
	ErrNotFound = errors.New("blob: no object with that digest")
	// ErrMismatch is returned by Get and Check for an object whose bytes do
	// not match its reference (size or digest).
	ErrMismatch = errors.New("blob: object does not match its digest")
	// ErrBadRef is returned for a reference that is not a sha256 digest.
	ErrBadRef = errors.New("blob: malformed reference")
)

// Ref is a reference to a stored payload: its digest ("sha256:<hex>") and
// size in bytes.
type Ref struct {
	Digest string `json:"digest"`
	Size   int64  `json:"size"`
}

// RefOf returns the reference of data, without storing it.
func RefOf(data []byte) Ref {
	sum := sha256.Sum256(data)
	return Ref{Digest: DigestPrefix + hex.EncodeToString(sum[:]), Size: int64(len(data))}
}

// Name returns the object name of r in the bucket: its digest's hex.
func (r Ref) Name() (string, error) {
	h, ok := strings.CutPrefix(r.Digest, DigestPrefix)
	if !ok || len(h) != 2*sha256.Size {
		return "", fmt.Errorf("%w: digest %q", ErrBadRef, r.Digest)
	}
	if _, err := hex.DecodeString(h); err != nil {
		return "", fmt.Errorf("%w: digest %q", ErrBadRef, r.Digest)
	}
	return h, nil
}

// Store is a bucket of payloads. It is safe for concurrent use.
type Store struct {
	os     jetstream.ObjectStore
	js     jetstream.JetStream
	stream jetstream.Stream // the bucket's stream, for its meta messages
	bucket string
	// timeout bounds a read or write made without a deadline of its own.
	timeout time.Duration
}

// Config configures Open.
type Config struct {
	// Bucket is the Object Store bucket (Bucket when empty).
	Bucket string
	// Replicas of the bucket's stream (1 when 0).
	Replicas int
	// Storage of the bucket's stream (file by default).
	Storage jetstream.StorageType
}

// Open creates the bucket if it does not exist (CreateOrUpdateObjectStore)
// and returns its Store.
func Open(ctx context.Context, js jetstream.JetStream, cfg Config) (*Store, error) {
	if cfg.Bucket == "" {
		cfg.Bucket = Bucket
	}
	if cfg.Replicas <= 0 {
		cfg.Replicas = 1
	}
	os, err := js.CreateOrUpdateObjectStore(ctx, jetstream.ObjectStoreConfig{
		Bucket:      cfg.Bucket,
		Description: "payloads stored by reference (claim checks), named by their SHA-256 digest",
		Replicas:    cfg.Replicas,
		Storage:     cfg.Storage,
		Compression: true,
	})
	if err != nil {
		return nil, fmt.Errorf("blob: open bucket %s: %w", cfg.Bucket, err)
	}
	return newStore(ctx, js, os, cfg.Bucket)
}

func newStore(ctx context.Context, js jetstream.JetStream, os jetstream.ObjectStore, bucket string) (*Store, error) {
	st, err := js.Stream(ctx, "OBJ_"+bucket)
	if err != nil {
		return nil, fmt.Errorf("blob: open bucket %s: %w", bucket, err)
	}
	return &Store{os: os, js: js, stream: st, bucket: bucket, timeout: 2 * time.Minute}, nil
}

// Put stores data once and returns its reference: an object with the same
// digest already stored is not written again, but touched (its meta
// message stored again), so that its age, which Sweeper reads, counts from
// this Put. The object is durable when Put returns.
func (s *Store) Put(ctx context.Context, data []byte) (Ref, error) {
	r := RefOf(data)
	name, _ := r.Name()
	ctx, cancel := s.bound(ctx)
	defer cancel()
	if ok, err := s.touch(ctx, name, r.Size); err != nil {
		return Ref{}, fmt.Errorf("blob: put %s: %w", r.Digest, err)
	} else if ok {
		return r, nil
	}
	if _, err := s.os.PutBytes(ctx, name, data); err != nil {
		return Ref{}, fmt.Errorf("blob: put %s (%d bytes): %w", r.Digest, r.Size, err)
	}
	return r, nil
}

// Get returns the bytes r names, checked against its size and digest.
func (s *Store) Get(ctx context.Context, r Ref) ([]byte, error) {
	name, err := r.Name()
	if err != nil {
		return nil, err
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	data, err := s.os.GetBytes(ctx, name)
	switch {
	case errors.Is(err, jetstream.ErrObjectNotFound):
		return nil, fmt.Errorf("%w: %s", ErrNotFound, r.Digest)
	case errors.Is(err, jetstream.ErrDigestMismatch):
		return nil, fmt.Errorf("%w: %s: %w", ErrMismatch, r.Digest, err)
	case err != nil:
		return nil, fmt.Errorf("blob: get %s: %w", r.Digest, err)
	}
	if got := RefOf(data); got != r {
		return nil, fmt.Errorf("%w: %s holds %d bytes of digest %s", ErrMismatch, r.Digest, got.Size, got.Digest)
	}
	return data, nil
}

// Check reads the object r names and reports whether it is there and
// matches r: nil, or an error wrapping ErrNotFound or ErrMismatch.
func (s *Store) Check(ctx context.Context, r Ref) error {
	_, err := s.Get(ctx, r)
	return err
}

// Delete removes the object r names; a missing one is not an error.
func (s *Store) Delete(ctx context.Context, r Ref) error {
	name, err := r.Name()
	if err != nil {
		return err
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	if err := s.os.Delete(ctx, name); err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
		return fmt.Errorf("blob: delete %s: %w", r.Digest, err)
	}
	return nil
}

// List returns the references of every object in the bucket.
func (s *Store) List(ctx context.Context) ([]Ref, error) {
	objs, err := s.Objects(ctx)
	refs := make([]Ref, len(objs))
	for i, o := range objs {
		refs[i] = o.Ref
	}
	return refs, err
}

func (s *Store) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, s.timeout)
}

// ErrNoBucket is returned by Bind when the bucket does not exist (nothing
// was ever stored by reference).
var ErrNoBucket = errors.New("blob: no bucket")

// Bind returns the Store of an existing bucket (Bucket when empty),
// without creating it: ErrNoBucket when there is none.
func Bind(ctx context.Context, js jetstream.JetStream, bucket string) (*Store, error) {
	if bucket == "" {
		bucket = Bucket
	}
	os, err := js.ObjectStore(ctx, bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) || errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, fmt.Errorf("%w %s", ErrNoBucket, bucket)
	}
	if err != nil {
		return nil, fmt.Errorf("blob: bind bucket %s: %w", bucket, err)
	}
	return newStore(ctx, js, os, bucket)
}
