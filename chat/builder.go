package chat

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/forever-agents/forever/chat/chunk"
	"github.com/forever-agents/forever/chat/llm"
	"github.com/forever-agents/forever/eventlog"
)

// builder folds a stream's chunks into the assistant message they show, and
// remembers which blocks are open. The same code runs live (on each chunk a
// turn writes) and on recovery (on the stored chunks), so a recovered turn
// knows exactly what clients saw and continues where the stream stopped.
type builder struct {
	started  bool // the start chunk was written
	stepOpen bool // start-step without finish-step
	steps    int  // start-step chunks: the steps begun
	// stepFirst is the index in parts of the current (or last) step's
	// first part.
	stepFirst int
	textOpen  string // id of the open text block, "" if none
	reasOpen  string // id of the open reasoning block
	blocks    int    // blocks started, for ids
	parts     []Part // their Text is kept in text while streaming
	// text[i] accumulates the deltas of part i (nil for a tool part): a
	// turn has thousands of deltas, and appending each to a string would
	// copy the whole answer every time.
	text      []*strings.Builder
	index     map[string]int // block or tool call id -> part index
	chunks    int
	terminal  string // type of the terminal chunk, "" while open
	errorText string
	finish    string
	usage     *llm.Usage // from the finish chunk's metadata
}

func newBuilder() *builder { return &builder{index: map[string]int{}} }

// add applies one chunk.
func (b *builder) add(c chunk.Chunk) {
	b.chunks++
	switch c.Type {
	case chunk.Start:
		b.started = true
	case chunk.StartStep:
		b.stepOpen = true
		b.steps++
		b.stepFirst = len(b.parts)
	case chunk.FinishStep:
		b.stepOpen = false
	case chunk.TextStart:
		b.blocks++
		b.textOpen = c.ID
		b.index[c.ID] = b.addPart(Part{Type: PartText})
	case chunk.TextDelta:
		if i, ok := b.index[c.ID]; ok {
			b.text[i].WriteString(c.Delta)
		}
	case chunk.TextEnd:
		if b.textOpen == c.ID {
			b.textOpen = ""
		}
	case chunk.ReasoningStart:
		b.blocks++
		b.reasOpen = c.ID
		b.index[c.ID] = b.addPart(Part{Type: PartReasoning})
	case chunk.ReasoningDelta:
		if i, ok := b.index[c.ID]; ok {
			b.text[i].WriteString(c.Delta)
		}
	case chunk.ReasoningEnd:
		if b.reasOpen == c.ID {
			b.reasOpen = ""
		}
	case chunk.ToolInputStart:
		b.index["tool:"+c.ToolCallID] = b.addPart(Part{Type: PartTool, ToolCallID: c.ToolCallID, ToolName: c.ToolName, State: ToolInputStreaming})
	case chunk.ToolInputDelta:
		// The input text is kept only once complete (tool-input-available).
	case chunk.ToolInput:
		i, ok := b.index["tool:"+c.ToolCallID]
		if !ok {
			i = b.addPart(Part{Type: PartTool, ToolCallID: c.ToolCallID, ToolName: c.ToolName})
			b.index["tool:"+c.ToolCallID] = i
		}
		b.parts[i].State, b.parts[i].Input = ToolInputAvailable, c.Input
	case chunk.ToolOutput:
		if i, ok := b.index["tool:"+c.ToolCallID]; ok {
			b.parts[i].State, b.parts[i].Output = ToolOutput, c.Output
		}
	case chunk.ToolOutputError:
		if i, ok := b.index["tool:"+c.ToolCallID]; ok {
			b.parts[i].State, b.parts[i].ErrorText = ToolOutputError, c.ErrorText
		}
	case chunk.ToolApprovalRequest:
		if i, ok := b.index["tool:"+c.ToolCallID]; ok {
			b.parts[i].State, b.parts[i].Approval = ToolApprovalRequested, &ToolApproval{ID: c.ApprovalID}
		}
	case chunk.ToolOutputDenied:
		if i, ok := b.index["tool:"+c.ToolCallID]; ok {
			b.parts[i].State = ToolOutputDenied
		}
	case chunk.ToolInputError:
		i, ok := b.index["tool:"+c.ToolCallID]
		if !ok {
			i = b.addPart(Part{Type: PartTool, ToolCallID: c.ToolCallID, ToolName: c.ToolName})
			b.index["tool:"+c.ToolCallID] = i
		}
		b.parts[i].State, b.parts[i].Input, b.parts[i].ErrorText = ToolOutputError, c.Input, c.ErrorText
	case chunk.Finish:
		b.terminal, b.finish = c.Type, c.FinishReason
		var md chunk.FinishMetadata
		if len(c.MessageMetadata) > 0 && json.Unmarshal(c.MessageMetadata, &md) == nil {
			if md.Usage != nil {
				b.usage = &llm.Usage{InputTokens: md.Usage.InputTokens, OutputTokens: md.Usage.OutputTokens}
			}
			if md.FinishReason != "" {
				b.finish = md.FinishReason
			}
		}
	case chunk.Error:
		b.terminal, b.errorText = c.Type, c.ErrorText
	case chunk.Abort:
		b.terminal = c.Type
	case chunk.Restart:
		// The answer starts again: what came before is dropped. Block
		// ids go on counting, so the new blocks' ids are new.
		b.stepOpen, b.steps, b.stepFirst = false, 0, 0
		b.textOpen, b.reasOpen = "", ""
		b.parts, b.text, b.index = nil, nil, map[string]int{}
	default:
		if c.IsData() {
			// A data part: one of its type and id is replaced, as the AI
			// SDK's clients do.
			key := "data:" + c.Type + "\x00" + c.ID
			if i, ok := b.index[key]; ok && c.ID != "" {
				b.parts[i].Data = c.Data
				return
			}
			b.index[key] = b.addPart(Part{Type: c.Type, ID: c.ID, Data: c.Data})
		}
	}
}

// dataPart returns the data part of type typ and id, if the stream has one.
func (b *builder) dataPart(typ, id string) (Part, bool) {
	i, ok := b.index["data:"+typ+"\x00"+id]
	if !ok {
		return Part{}, false
	}
	return b.parts[i], true
}

// addPart appends p, with a text accumulator unless it is a tool or data
// part, and returns its index.
func (b *builder) addPart(p Part) int {
	var t *strings.Builder
	if p.Type != PartTool && !p.IsData() {
		t = &strings.Builder{}
	}
	b.parts, b.text = append(b.parts, p), append(b.text, t)
	return len(b.parts) - 1
}

// Parts returns a copy of the message parts so far, without empty blocks.
func (b *builder) Parts() []Part { return b.partsIn(0, len(b.parts)) }

// stepParts returns the parts of the current (or last) step, and those of
// the steps before it.
func (b *builder) stepParts() (earlier, current []Part) {
	return b.partsIn(0, b.stepFirst), b.partsIn(b.stepFirst, len(b.parts))
}

// stepCalls returns the tool calls of the current (or last) step, in the
// order the model made them.
func (b *builder) stepCalls() []Part {
	var calls []Part
	for _, p := range b.parts[b.stepFirst:] {
		if p.Type == PartTool {
			calls = append(calls, p)
		}
	}
	return calls
}

// partsIn returns a copy of parts[lo:hi] without empty blocks.
func (b *builder) partsIn(lo, hi int) []Part {
	out := make([]Part, 0, hi-lo)
	for i := lo; i < hi; i++ {
		p := b.parts[i]
		if t := b.text[i]; t != nil {
			if p.Text = t.String(); p.Text == "" {
				continue
			}
		}
		out = append(out, p)
	}
	return out
}

// Text returns the answer text so far.
func (b *builder) Text() string { return partsText(b.Parts()) }

// loadStream reads a stream's stored chunks into a builder.
func loadStream(ctx context.Context, lg Log, agent, stream string) (*builder, error) {
	b, _, err := readStream(ctx, lg, agent, stream)
	return b, err
}

// readStream is loadStream that also returns the stored chunk events'
// first sequence (0 when none is stored), skipping a retention marker.
func readStream(ctx context.Context, lg Log, agent, stream string) (*builder, eventlog.Seq, error) {
	return readStreamInto(ctx, lg, nil, agent, stream, newBuilder())
}

// readStreamInto is readStream onto b (a builder preloaded with a waiting
// message, for a turn that resumes it). A chunk holding a payload by
// reference is read back through bs, so the builder holds the bytes as
// the live turn did.
func readStreamInto(ctx context.Context, lg Log, bs chunk.Getter, agent, stream string, b *builder) (*builder, eventlog.Seq, error) {
	evs, err := lg.Read(ctx, eventlog.Filter{Agent: agent, Stream: stream}, 0, 0)
	if err != nil {
		return nil, 0, err
	}
	var first eventlog.Seq
	var asm chunk.Assembler
	for _, e := range evs {
		if e.Type == chunk.EventExpired {
			// Retention's marker: the chunks before it were purged.
			continue
		}
		if first == 0 {
			first = e.Seq
		}
		// An event completes no chunk (a part), one, or several (a
		// packed record).
		cs, err := asm.Chunks(e.Type, e.Data)
		if err != nil {
			return nil, 0, err
		}
		for _, c := range cs {
			if c.Blobs != nil {
				if bs == nil {
					return nil, 0, fmt.Errorf("chat: chunk %d of stream %s holds a payload by reference and no blob store is configured", e.Seq, stream)
				}
				if c, err = chunk.Resolve(ctx, bs, c); err != nil {
					return nil, 0, err
				}
			}
			b.add(c)
		}
	}
	return b, first, nil
}

// emitter turns provider deltas into chunks: it writes each through the
// stream writer and folds it into the builder. The writer merges a burst of
// deltas into one chunk (chunk.MergeDeltas), so the builder counts the
// chunks the writer stored, not the deltas: its count is what a recovery
// rebuilds from the stored stream, and the model call's idempotency key
// and the snapshot's chunk index are made from it.
//
// A payload over the blob threshold (a tool's input or output, a data
// part) is stored by reference in the chunk (chunk.Offload) when chunks
// may hold references (Config.ChunkRefsWritable): the builder keeps the
// bytes, the chunks stream only the reference.
type emitter struct {
	w *chunk.Writer
	b *builder
	// blobs and threshold are chunk.Offload's: nil and 0 when chunks
	// carry their payloads inline.
	blobs     chunk.Putter
	threshold int
	refs      prometheus.Counter // forever_chat_chunk_refs_total
}

// newEmitter returns an emitter that goes on writing stream after the
// chunks b holds.
func (a *Agent) newEmitter(stream string, b *builder) *emitter {
	opts := []chunk.WriterOption{chunk.MergeDeltas(), chunk.PublishLive(a.cfg.Live)}
	if a.cfg.ChunkBatchesWritable != nil && a.cfg.ChunkBatchesWritable() {
		opts = append(opts, chunk.PackChunks())
	}
	em := &emitter{w: chunk.NewWriter(a.cfg.Batcher, a.agent, stream, b.chunks, a.cfg.MaxPayload, opts...), b: b}
	if th := a.chunkBlobThreshold(); th > 0 {
		em.blobs, em.threshold, em.refs = a.cfg.Blobs, th, a.metrics.chunkRefs
	}
	return em
}

func (em *emitter) emit(ctx context.Context, c chunk.Chunk) error {
	stored, err := chunk.Offload(ctx, em.blobs, em.threshold, c)
	if err != nil {
		return err
	}
	if err := em.w.Write(ctx, stored); err != nil {
		return err
	}
	if stored.Blobs != nil && em.refs != nil {
		em.refs.Inc()
	}
	c.Blobs = nil // the builder keeps the bytes
	em.b.add(c)
	em.b.chunks = em.w.Written() // a merged delta is no chunk of its own
	return nil
}

func (em *emitter) blockID(prefix string) string { return prefix + "-" + strconv.Itoa(em.b.blocks) }

func (em *emitter) ensureStep(ctx context.Context) error {
	if em.b.stepOpen {
		return nil
	}
	return em.emit(ctx, chunk.Chunk{Type: chunk.StartStep})
}

func (em *emitter) closeText(ctx context.Context) error {
	if id := em.b.textOpen; id != "" {
		return em.emit(ctx, chunk.Chunk{Type: chunk.TextEnd, ID: id})
	}
	return nil
}

func (em *emitter) closeReasoning(ctx context.Context) error {
	if id := em.b.reasOpen; id != "" {
		return em.emit(ctx, chunk.Chunk{Type: chunk.ReasoningEnd, ID: id})
	}
	return nil
}

// closeBlocks ends the open text and reasoning blocks.
func (em *emitter) closeBlocks(ctx context.Context) error {
	if err := em.closeText(ctx); err != nil {
		return err
	}
	return em.closeReasoning(ctx)
}

// delta writes the chunks of one provider delta. Finish and ResponseMeta
// deltas write nothing here.
func (em *emitter) delta(ctx context.Context, d llm.Delta) error {
	switch d.Kind {
	case llm.TextDelta:
		if d.Text == "" {
			return nil
		}
		if err := em.ensureStep(ctx); err != nil {
			return err
		}
		if err := em.closeReasoning(ctx); err != nil {
			return err
		}
		if em.b.textOpen == "" {
			if err := em.emit(ctx, chunk.Chunk{Type: chunk.TextStart, ID: em.blockID("txt")}); err != nil {
				return err
			}
		}
		return em.emit(ctx, chunk.Chunk{Type: chunk.TextDelta, ID: em.b.textOpen, Delta: d.Text})
	case llm.ReasoningDelta:
		if d.Text == "" {
			return nil
		}
		if err := em.ensureStep(ctx); err != nil {
			return err
		}
		if err := em.closeText(ctx); err != nil {
			return err
		}
		if em.b.reasOpen == "" {
			if err := em.emit(ctx, chunk.Chunk{Type: chunk.ReasoningStart, ID: em.blockID("rsn")}); err != nil {
				return err
			}
		}
		return em.emit(ctx, chunk.Chunk{Type: chunk.ReasoningDelta, ID: em.b.reasOpen, Delta: d.Text})
	case llm.ToolInputDelta, llm.ToolCallDone:
		if err := em.ensureStep(ctx); err != nil {
			return err
		}
		if err := em.closeBlocks(ctx); err != nil {
			return err
		}
		if _, ok := em.b.index["tool:"+d.ToolCallID]; !ok {
			if err := em.emit(ctx, chunk.Chunk{Type: chunk.ToolInputStart, ToolCallID: d.ToolCallID, ToolName: d.ToolName}); err != nil {
				return err
			}
		}
		if d.Kind == llm.ToolInputDelta {
			if d.Text == "" {
				return nil
			}
			return em.emit(ctx, chunk.Chunk{Type: chunk.ToolInputDelta, ToolCallID: d.ToolCallID, InputTextDelta: d.Text})
		}
		input := d.Input
		if len(bytes.TrimSpace(input)) == 0 {
			input = []byte("{}")
		}
		if !json.Valid(input) {
			// The model's arguments are not JSON: the call ends with an
			// error the model is shown, and the turn goes on.
			raw, _ := json.Marshal(string(input))
			return em.emit(ctx, chunk.Chunk{Type: chunk.ToolInputError, ToolCallID: d.ToolCallID, ToolName: d.ToolName,
				Input: raw, ErrorText: "invalid tool input: the arguments are not valid JSON"})
		}
		return em.emit(ctx, chunk.Chunk{Type: chunk.ToolInput, ToolCallID: d.ToolCallID, ToolName: d.ToolName, Input: input})
	}
	return nil
}

// finish ends the stream normally.
func (em *emitter) finish(ctx context.Context, reason string, usage llm.Usage) error {
	if err := em.closeBlocks(ctx); err != nil {
		return err
	}
	if em.b.stepOpen {
		if err := em.emit(ctx, chunk.Chunk{Type: chunk.FinishStep}); err != nil {
			return err
		}
	}
	// The usage rides on the finish chunk, so a turn finalized after a crash
	// between this chunk and usage.recorded still records it; so does the
	// turn's own finish reason when the AI SDK's differs from it.
	fm := chunk.FinishMetadata{Usage: &chunk.UsageMetadata{InputTokens: usage.InputTokens, OutputTokens: usage.OutputTokens}}
	ui := uiFinishReason(reason)
	if ui != reason {
		fm.FinishReason = reason
	}
	md, err := json.Marshal(fm)
	if err != nil {
		return err
	}
	return em.emit(ctx, chunk.Chunk{Type: chunk.Finish, FinishReason: ui, MessageMetadata: md})
}

// uiFinishReason maps a turn's finish reason to the AI SDK's finish
// reasons (stop, length, content-filter, tool-calls, error, other), which
// its clients validate.
func uiFinishReason(reason string) string {
	switch reason {
	case "stop", "length", "content-filter", "tool-calls", "error", "other":
		return reason
	case llm.FinishToolCalls, FinishStepLimit:
		return "tool-calls"
	case "content_filter", "refusal":
		return "content-filter"
	case "max_tokens", "max_output_tokens":
		return "length"
	case "end_turn", "stop_sequence", "completed":
		return "stop"
	}
	return "other"
}
