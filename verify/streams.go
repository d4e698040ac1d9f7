package verify

import (
	"cmp"
	"fmt"
	"maps"
	"slices"

	"github.com/forever-agents/forever/chat/chunk"
	"github.com/forever-agents/forever/eventlog"
)

type streamKey struct{ agent, stream string }

// streamState follows one chat stream's chunks in order.
type streamState struct {
	asm  chunk.Assembler
	next int // index the next whole chunk must have
	// split is the index of the split chunk whose parts are being read,
	// -1 when none.
	split    int
	starts   int
	terminal string // terminal chunk type, "" while none
	termSeq  eventlog.Seq
	expired  bool
	// order holds the order and start violations, reported at the end
	// unless the stream turns out to be expired (purged by retention).
	order []Violation
}

// chunk checks one event of the chunks stream.
func (c *checker) chunk(e eventlog.Event) {
	c.chunks++
	c.seen(e.Agent, e.ID)
	if e.Type == eventlog.TypeDeleted {
		// The agent's chunks tombstone: its streams before it are gone
		// (what a crash left of them is not checked).
		for k := range c.streams {
			if k.agent == e.Agent {
				delete(c.streams, k)
			}
		}
		return
	}
	k := streamKey{e.Agent, e.Stream}
	s := c.streams[k]
	if s == nil {
		s = &streamState{split: -1}
		c.streams[k] = s
	}
	v := Violation{Agent: e.Agent, Stream: e.Stream, Seq: e.Seq}
	if e.Type == chunk.EventExpired {
		s.expired = true
		return
	}
	c.collectRefs(e) // a chunk's payload held by reference (chunk.Blobs)
	idx, ok := chunk.IndexOf(e)
	if !ok {
		v.Kind, v.Text = KindChunkCorrupt, fmt.Sprintf("chunk event id %q is not <stream>/<index>", e.ID)
		c.violate(v)
		return
	}
	part, isPart := chunk.SplitPart(e.Type, e.Data)
	switch {
	case s.split >= 0 && (!isPart || idx != s.split):
		v.Kind, v.Text = KindChunkOrder, fmt.Sprintf("chunk %d (%s) while split chunk %d is incomplete", idx, e.ID, s.split)
		s.order = append(s.order, v)
		s.split, s.asm = -1, chunk.Assembler{}
		if isPart && part != 0 {
			return
		}
	case s.split < 0 && idx != s.next:
		what := "gap"
		if idx < s.next {
			what = "repeat"
		}
		v.Kind, v.Text = KindChunkOrder, fmt.Sprintf("chunk index %d (%s), want %d", idx, what, s.next)
		s.order = append(s.order, v)
		s.next = idx // resynchronise, so one gap is one violation
	}
	if isPart && s.split < 0 {
		s.split = idx
	}
	chs, err := s.asm.Chunks(e.Type, e.Data) // a packed record holds several
	if err != nil {
		v.Kind, v.Text = KindChunkCorrupt, fmt.Sprintf("chunk %s: %v", e.ID, err)
		c.violate(v)
		s.split, s.asm = -1, chunk.Assembler{}
		s.next = idx + 1
		return
	}
	if len(chs) == 0 {
		return
	}
	s.split, s.next = -1, idx+len(chs)
	for k, ch := range chs {
		s.check(c, v, idx+k, ch, e.Seq)
	}
}

// check checks chunk idx of the stream, stored at seq, against the chunks
// before it.
func (s *streamState) check(c *checker, v Violation, idx int, ch chunk.Chunk, seq eventlog.Seq) {
	if s.terminal != "" {
		v.Kind, v.Text = KindAfterTerminal, fmt.Sprintf("%s chunk %d after the stream's %s at seq %d", ch.Type, idx, s.terminal, s.termSeq)
		c.violate(v)
		return
	}
	switch {
	case idx == 0 && ch.Type != chunk.Start:
		v.Kind, v.Text = KindStreamStart, fmt.Sprintf("the stream's first chunk is %s, want start", ch.Type)
		s.order = append(s.order, v)
	case ch.Type == chunk.Start:
		s.starts++
		if s.starts > 1 {
			v.Kind, v.Text = KindStreamStart, fmt.Sprintf("a second start chunk at index %d", idx)
			s.order = append(s.order, v)
		}
	}
	if ch.Terminal() {
		s.terminal, s.termSeq = ch.Type, seq
	}
}

// finishStream reports a stream's order and start violations unless
// retention purged it.
func (c *checker) finishStream(k streamKey, s *streamState) {
	if s.expired {
		return
	}
	c.out = append(c.out, s.order...)
}

func sortedKeys[V any](m map[string]V) []string {
	return slices.Sorted(maps.Keys(m))
}

func sortedStreamKeys(m map[streamKey]*streamState) []streamKey {
	return slices.SortedFunc(maps.Keys(m), func(a, b streamKey) int {
		return cmp.Or(cmp.Compare(a.agent, b.agent), cmp.Compare(a.stream, b.stream))
	})
}

func sortedAcks(m map[Ack]bool) []Ack {
	return slices.SortedFunc(maps.Keys(m), func(a, b Ack) int {
		return cmp.Or(cmp.Compare(a.Agent, b.Agent), cmp.Compare(a.ID, b.ID))
	})
}
