package chat

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/forever-agents/forever/blob"
	"github.com/forever-agents/forever/chat/chunk"
)

// Blobs stores payloads by reference (a claim check): *blob.Store, on the
// JetStream Object Store. Put returns once the object is durable, so an
// event appended after it never names a missing object.
type Blobs interface {
	Put(ctx context.Context, data []byte) (blob.Ref, error)
	Get(ctx context.Context, r blob.Ref) ([]byte, error)
}

// PartBlobs are the fields of a Part stored by reference: each set one
// names the bytes of the field, which is empty in the stored part. Text
// holds the text's bytes; Input, Output and Data their JSON.
type PartBlobs struct {
	Text   *blob.Ref `json:"text,omitempty"`
	Input  *blob.Ref `json:"input,omitempty"`
	Output *blob.Ref `json:"output,omitempty"`
	Data   *blob.Ref `json:"data,omitempty"`
}

// Refs returns the references of b.
func (b *PartBlobs) Refs() []blob.Ref {
	if b == nil {
		return nil
	}
	var out []blob.Ref
	for _, r := range []*blob.Ref{b.Text, b.Input, b.Output, b.Data} {
		if r != nil {
			out = append(out, *r)
		}
	}
	return out
}

// MessageRefs returns the references the parts of m hold.
func MessageRefs(m Message) []blob.Ref {
	var out []blob.Ref
	for _, p := range m.Parts {
		out = append(out, p.Blobs.Refs()...)
	}
	return out
}

// blobThreshold is the size above which a field goes to the blob store;
// 0 when payloads are not stored by reference.
func (a *Agent) blobThreshold() int {
	if a.cfg.Blobs == nil || (a.cfg.BlobRefsWritable != nil && !a.cfg.BlobRefsWritable()) {
		return 0
	}
	if a.cfg.BlobThreshold <= 0 {
		return blob.DefaultThreshold
	}
	return a.cfg.BlobThreshold
}

// blobGetter is the store chunks' references are read back from; nil
// when none is configured.
func (a *Agent) blobGetter() chunk.Getter {
	if a.cfg.Blobs == nil {
		return nil
	}
	return a.cfg.Blobs
}

// chunkBlobThreshold is the size above which a chunk's payload goes to
// the blob store, the chunk holding its reference; 0 when chunks carry
// their payloads inline.
func (a *Agent) chunkBlobThreshold() int {
	if a.cfg.ChunkRefsWritable != nil && !a.cfg.ChunkRefsWritable() {
		return 0
	}
	return a.blobThreshold()
}

// offloadParts returns ps with every field over threshold stored in bs
// and replaced by its reference; ps is not modified. Fields already held
// by reference stay so.
func offloadParts(ctx context.Context, bs Blobs, threshold int, ps []Part) ([]Part, error) {
	if bs == nil || threshold <= 0 {
		return ps, nil
	}
	var out []Part
	for i, p := range ps {
		q := p
		changed := false
		put := func(data []byte, ref **blob.Ref) error {
			if len(data) <= threshold {
				return nil
			}
			r, err := bs.Put(ctx, data)
			if err != nil {
				return fmt.Errorf("chat: store a payload of %d bytes by reference: %w", len(data), err)
			}
			*ref = &r
			changed = true
			return nil
		}
		var b PartBlobs
		if err := put([]byte(p.Text), &b.Text); err != nil {
			return nil, err
		}
		if err := put(p.Input, &b.Input); err != nil {
			return nil, err
		}
		if err := put(p.Output, &b.Output); err != nil {
			return nil, err
		}
		if err := put(p.Data, &b.Data); err != nil {
			return nil, err
		}
		if changed {
			var nb PartBlobs
			if q.Blobs != nil {
				nb = *q.Blobs
			}
			if b.Text != nil {
				nb.Text, q.Text = b.Text, ""
			}
			if b.Input != nil {
				nb.Input, q.Input = b.Input, nil
			}
			if b.Output != nil {
				nb.Output, q.Output = b.Output, nil
			}
			if b.Data != nil {
				nb.Data, q.Data = b.Data, nil
			}
			q.Blobs = &nb
			if out == nil {
				out = append(make([]Part, 0, len(ps)), ps[:i]...)
			}
		}
		if out != nil {
			out = append(out, q)
		}
	}
	if out == nil {
		return ps, nil
	}
	return out, nil
}

// resolveParts returns ps with each reference of at most inline bytes (all
// when inline <= 0) replaced by the bytes it names; ps is not modified. A
// reference left in place keeps its Blobs entry.
func resolveParts(ctx context.Context, bs Blobs, ps []Part, inline int64) ([]Part, error) {
	var out []Part
	for i, p := range ps {
		if p.Blobs == nil {
			if out != nil {
				out = append(out, p)
			}
			continue
		}
		if out == nil {
			out = append(make([]Part, 0, len(ps)), ps[:i]...)
		}
		if bs == nil {
			out = append(out, p) // no store: shown as references
			continue
		}
		q := p
		left := *p.Blobs
		get := func(r **blob.Ref) ([]byte, error) {
			if *r == nil || (inline > 0 && (*r).Size > inline) {
				return nil, nil
			}
			data, err := bs.Get(ctx, **r)
			if err != nil {
				return nil, fmt.Errorf("chat: read a payload stored by reference: %w", err)
			}
			*r = nil
			return data, nil
		}
		if data, err := get(&left.Text); err != nil {
			return nil, err
		} else if data != nil {
			q.Text = string(data)
		}
		if data, err := get(&left.Input); err != nil {
			return nil, err
		} else if data != nil {
			q.Input = json.RawMessage(data)
		}
		if data, err := get(&left.Output); err != nil {
			return nil, err
		} else if data != nil {
			q.Output = json.RawMessage(data)
		}
		if data, err := get(&left.Data); err != nil {
			return nil, err
		} else if data != nil {
			q.Data = json.RawMessage(data)
		}
		if left.Refs() == nil {
			q.Blobs = nil
		} else {
			q.Blobs = &left
		}
		out = append(out, q)
	}
	if out == nil {
		return ps, nil
	}
	return out, nil
}

// offloadMessageEvent returns v, the data of a message event (Message or
// messageUpdated), with its large fields stored by reference.
func (a *Agent) offloadMessageEvent(v any) (any, error) {
	th := a.blobThreshold()
	if th == 0 {
		return v, nil
	}
	ctx := context.Background() // Blobs bounds each call
	switch m := v.(type) {
	case Message:
		ps, err := offloadParts(ctx, a.cfg.Blobs, th, m.Parts)
		m.Parts = ps
		return m, err
	case messageUpdated:
		ps, err := offloadParts(ctx, a.cfg.Blobs, th, m.Parts)
		m.Parts = ps
		return m, err
	}
	return v, nil
}

// SetBlobs gives s the blob store its readers (Messages, History, Message)
// resolve references with. Call it before the Store is used.
func (s *Store) SetBlobs(bs Blobs) { s.blobs = bs }

// resolve returns m with its references resolved up to inline bytes each
// (all when inline <= 0).
func (s *Store) resolve(m Message, inline int64) (Message, error) {
	ps, err := resolveParts(context.Background(), s.blobs, m.Parts, inline)
	if err != nil {
		return m, fmt.Errorf("%w (message %q)", err, m.ID)
	}
	m.Parts = ps
	return m, nil
}

// offloadResult stores a tool output over the threshold by reference, so
// the step's op.completed holds the reference, not the bytes.
func (a *Agent) offloadResult(ctx context.Context, res toolResult) (toolResult, error) {
	th := a.blobThreshold()
	if th == 0 || len(res.Output) <= th {
		return res, nil
	}
	r, err := a.cfg.Blobs.Put(ctx, res.Output)
	if err != nil {
		return toolResult{}, fmt.Errorf("chat: store a tool output of %d bytes by reference: %w", len(res.Output), err)
	}
	return toolResult{OutputRef: &r}, nil
}

// resolveResult reads back a tool output a step recorded by reference. It
// keeps OutputRef, so the output's chunk can hold the reference without
// storing the bytes again.
func (a *Agent) resolveResult(ctx context.Context, res toolResult) (toolResult, error) {
	if res.OutputRef == nil {
		return res, nil
	}
	if a.cfg.Blobs == nil {
		return res, fmt.Errorf("chat: a tool output is stored by reference (%s) and no blob store is configured", res.OutputRef.Digest)
	}
	data, err := a.cfg.Blobs.Get(ctx, *res.OutputRef)
	if err != nil {
		return res, fmt.Errorf("chat: read a tool output stored by reference: %w", err)
	}
	res.Output = data
	return res, nil
}

// offloadTurnStarted stores by reference what a turn.started carries over
// the threshold: the user message's parts, the parts of the message a
// resumed turn continues (Base) and client tool results (Answers). The
// request Body is left as it is.
func (a *Agent) offloadTurnStarted(ctx context.Context, t turnStarted) (turnStarted, error) {
	th := a.blobThreshold()
	if th == 0 {
		return t, nil
	}
	var err error
	if t.Message != nil {
		m := *t.Message
		if m.Parts, err = offloadParts(ctx, a.cfg.Blobs, th, m.Parts); err != nil {
			return t, err
		}
		t.Message = &m
	}
	if t.Base, err = offloadParts(ctx, a.cfg.Blobs, th, t.Base); err != nil {
		return t, err
	}
	var answers []ToolAnswer
	for i, ans := range t.Answers {
		if len(ans.Output) <= th {
			continue
		}
		r, err := a.cfg.Blobs.Put(ctx, ans.Output)
		if err != nil {
			return t, fmt.Errorf("chat: store a tool result of %d bytes by reference: %w", len(ans.Output), err)
		}
		if answers == nil {
			answers = slices.Clone(t.Answers)
		}
		answers[i].Output, answers[i].OutputRef = nil, &r
	}
	if answers != nil {
		t.Answers = answers
	}
	return t, nil
}

// resolveTurn reads back what a stored turn.started holds by reference.
func (s *Store) resolveTurn(t TurnInfo) (TurnInfo, error) {
	ctx := context.Background()
	ps, err := resolveParts(ctx, s.blobs, t.Base, 0)
	if err != nil {
		return t, fmt.Errorf("%w (turn %q)", err, t.RequestID)
	}
	t.Base = ps
	var answers []ToolAnswer
	for i, ans := range t.Answers {
		if ans.OutputRef == nil || s.blobs == nil {
			continue
		}
		data, err := s.blobs.Get(ctx, *ans.OutputRef)
		if err != nil {
			return t, fmt.Errorf("chat: read a tool result stored by reference (turn %q): %w", t.RequestID, err)
		}
		if answers == nil {
			answers = slices.Clone(t.Answers)
		}
		answers[i].Output, answers[i].OutputRef = data, nil
	}
	if answers != nil {
		t.Answers = answers
	}
	return t, nil
}
