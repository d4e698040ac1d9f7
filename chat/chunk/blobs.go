package chunk

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/forever-agents/forever/blob"
)

// Blobs are the fields of a chunk stored by reference (a claim check):
// each one set names the bytes of its field (package blob's Ref,
// {"digest":"sha256:<hex>","size":N}), which is empty in the stored chunk.
// Input, Output and Data hold the field's JSON. A chunk with Blobs is
// written only once the cluster's record format reads it (agentd's
// FormatChunkRefs): a reader of an earlier release would see the field
// empty. Text and reasoning deltas are never stored by reference: they
// are slices of a text the message event stores whole.
type Blobs struct {
	Input  *blob.Ref `json:"input,omitempty"`
	Output *blob.Ref `json:"output,omitempty"`
	Data   *blob.Ref `json:"data,omitempty"`
}

// Refs returns the references of b, in field order.
func (b *Blobs) Refs() []blob.Ref {
	if b == nil {
		return nil
	}
	var out []blob.Ref
	for _, r := range []*blob.Ref{b.Input, b.Output, b.Data} {
		if r != nil {
			out = append(out, *r)
		}
	}
	return out
}

// Ref returns the reference of the field named field ("input", "output"
// or "data"), nil when b holds none (or b is nil).
func (b *Blobs) Ref(field string) *blob.Ref {
	if b == nil {
		return nil
	}
	switch field {
	case "input":
		return b.Input
	case "output":
		return b.Output
	case "data":
		return b.Data
	}
	return nil
}

// Putter stores payloads by reference: *blob.Store.
type Putter interface {
	Put(ctx context.Context, data []byte) (blob.Ref, error)
}

// Getter reads back payloads stored by reference: *blob.Store.
type Getter interface {
	Get(ctx context.Context, r blob.Ref) ([]byte, error)
}

// Offload returns the form of c to store: every raw field (input, output,
// data) over threshold bytes is stored through p and replaced by its
// reference under Blobs. A field c already names in Blobs (its bytes
// stored before, such as a tool output its step recorded by reference)
// is not stored again, only emptied. c itself is not modified. A
// threshold <= 0 or a nil p leaves the fields inline and drops Blobs.
func Offload(ctx context.Context, p Putter, threshold int, c Chunk) (Chunk, error) {
	if p == nil || threshold <= 0 {
		c.Blobs = nil
		return c, nil
	}
	var nb Blobs
	if c.Blobs != nil {
		nb = *c.Blobs
	}
	for _, f := range []struct {
		v   *json.RawMessage
		ref **blob.Ref
	}{{&c.Input, &nb.Input}, {&c.Output, &nb.Output}, {&c.Data, &nb.Data}} {
		if *f.ref != nil {
			*f.v = nil
			continue
		}
		if len(*f.v) <= threshold {
			continue
		}
		r, err := p.Put(ctx, *f.v)
		if err != nil {
			return c, fmt.Errorf("chunk: store a %s chunk's payload of %d bytes by reference: %w", c.Type, len(*f.v), err)
		}
		*f.ref, *f.v = &r, nil
	}
	if nb.Refs() == nil {
		c.Blobs = nil
	} else {
		c.Blobs = &nb
	}
	return c, nil
}

// Resolve returns c with the fields it holds by reference read back
// through g and Blobs dropped: the chunk as it was written. A chunk
// without Blobs is returned as it is. An object that is not there (an
// error wrapping blob.ErrNotFound) or does not match its reference
// (blob.ErrMismatch) is an error, and c is returned unchanged with it.
func Resolve(ctx context.Context, g Getter, c Chunk) (Chunk, error) {
	if c.Blobs == nil {
		return c, nil
	}
	out := c
	for _, f := range []struct {
		v   *json.RawMessage
		ref *blob.Ref
	}{{&out.Input, c.Blobs.Input}, {&out.Output, c.Blobs.Output}, {&out.Data, c.Blobs.Data}} {
		if f.ref == nil {
			continue
		}
		data, err := g.Get(ctx, *f.ref)
		if err != nil {
			return c, fmt.Errorf("chunk: read a %s chunk's payload stored by reference: %w", c.Type, err)
		}
		*f.v = data
	}
	out.Blobs = nil
	return out, nil
}
