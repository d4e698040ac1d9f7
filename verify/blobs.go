package verify

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"

	"github.com/forever-agents/forever/blob"
	"github.com/forever-agents/forever/eventlog"
)

// Blobs reads the payloads events hold by reference (*blob.Store).
type Blobs interface {
	// Check returns nil when the object r names is stored and matches r,
	// else an error wrapping blob.ErrNotFound or blob.ErrMismatch.
	Check(ctx context.Context, r blob.Ref) error
}

// refPattern finds the references ({"digest":"sha256:<hex>","size":N}, as
// blob.Ref encodes) in an event's data.
var refPattern = regexp.MustCompile(`"digest":"sha256:([0-9a-f]{64})","size":([0-9]+)`)

// refSite is where a reference was first seen.
type refSite struct {
	agent string
	seq   eventlog.Seq
}

// collectRefs notes the references e's data holds.
func (c *checker) collectRefs(e eventlog.Event) {
	for _, m := range refPattern.FindAllSubmatch(e.Data, -1) {
		size, err := strconv.ParseInt(string(m[2]), 10, 64)
		if err != nil {
			continue
		}
		r := blob.Ref{Digest: blob.DigestPrefix + string(m[1]), Size: size}
		if _, ok := c.refs[r]; !ok {
			c.refs[r] = refSite{agent: e.Agent, seq: e.Seq}
		}
	}
}

// checkBlobs checks every reference found against bs: the object is there
// and matches its digest and size.
func (c *checker) checkBlobs(ctx context.Context, bs Blobs) error {
	refs := make([]blob.Ref, 0, len(c.refs))
	for r := range c.refs {
		refs = append(refs, r)
	}
	slices.SortFunc(refs, func(a, b blob.Ref) int {
		sa, sb := c.refs[a], c.refs[b]
		return int(sa.seq) - int(sb.seq)
	})
	for _, r := range refs {
		site := c.refs[r]
		err := bs.Check(ctx, r)
		c.blobs++
		switch {
		case err == nil:
		case errors.Is(err, blob.ErrNotFound):
			c.violate(Violation{Kind: KindBlobMissing, Agent: site.agent, Seq: site.seq,
				Text: fmt.Sprintf("the payload %s of %d bytes the event refers to is not in the blob store", r.Digest, r.Size)})
		case errors.Is(err, blob.ErrMismatch):
			c.violate(Violation{Kind: KindBlobMismatch, Agent: site.agent, Seq: site.seq,
				Text: fmt.Sprintf("the payload %s of %d bytes the event refers to does not match its digest: %v", r.Digest, r.Size, err)})
		case ctx.Err() != nil:
			return ctx.Err()
		default:
			return fmt.Errorf("verify: read payload %s: %w", r.Digest, err)
		}
	}
	return nil
}
