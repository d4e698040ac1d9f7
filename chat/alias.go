package chat

import (
	"github.com/forever-agents/forever/chat/chunk"
	"github.com/forever-agents/forever/eventlog"
)

// The chunk wire format lives in package chunk, which readers of streams
// import without the provider SDKs. These names keep chat's callers
// compiling; new code should use package chunk.

// Chunk is a chunk.Chunk: one piece of a chat stream.
type Chunk = chunk.Chunk

// FinishMetadata is a chunk.FinishMetadata.
type FinishMetadata = chunk.FinishMetadata

// UsageMetadata is a chunk.UsageMetadata.
type UsageMetadata = chunk.UsageMetadata

// Assembler is a chunk.Assembler.
type Assembler = chunk.Assembler

// Batcher is a chunk.Batcher: the part of eventlog.Batcher a stream writer
// uses.
type Batcher = chunk.Batcher

// StreamWriter is a chunk.Writer.
type StreamWriter = chunk.Writer

// StreamInfo is a chunk.StreamInfo.
type StreamInfo = chunk.StreamInfo

// Streams is a chunk.Streams.
type Streams = chunk.Streams

// Chunk types: see package chunk.
const (
	ChunkStart           = chunk.Start
	ChunkStartStep       = chunk.StartStep
	ChunkTextStart       = chunk.TextStart
	ChunkTextDelta       = chunk.TextDelta
	ChunkTextEnd         = chunk.TextEnd
	ChunkReasoningStart  = chunk.ReasoningStart
	ChunkReasoningDelta  = chunk.ReasoningDelta
	ChunkReasoningEnd    = chunk.ReasoningEnd
	ChunkToolInputStart  = chunk.ToolInputStart
	ChunkToolInputDelta  = chunk.ToolInputDelta
	ChunkToolInput       = chunk.ToolInput
	ChunkToolOutput      = chunk.ToolOutput
	ChunkToolOutputError = chunk.ToolOutputError
	ChunkToolInputError  = chunk.ToolInputError
	ChunkToolApproval    = chunk.ToolApprovalRequest
	ChunkToolDenied      = chunk.ToolOutputDenied
	ChunkFinishStep      = chunk.FinishStep
	ChunkFinish          = chunk.Finish
	ChunkError           = chunk.Error
	ChunkAbort           = chunk.Abort
)

// Stream statuses: see package chunk.
const (
	StatusStreaming = chunk.StatusStreaming
	StatusCompleted = chunk.StatusCompleted
	StatusError     = chunk.StatusError
	StatusAborted   = chunk.StatusAborted
)

// StreamsProjectionName is chunk.StreamsProjectionName.
const StreamsProjectionName = chunk.StreamsProjectionName

// ErrUnknownStream is chunk.ErrUnknownStream (the same error value).
var ErrUnknownStream = chunk.ErrUnknownStream

// ChunkPart is chunk.SplitPart.
func ChunkPart(typ string, data []byte) (part int, split bool) { return chunk.SplitPart(typ, data) }

// NewStreamWriter is chunk.NewWriter.
func NewStreamWriter(b Batcher, agent, stream string, next int, maxPayload int64, opts ...chunk.WriterOption) *StreamWriter {
	return chunk.NewWriter(b, agent, stream, next, maxPayload, opts...)
}

// StreamsProjection is chunk.StreamsProjection.
func StreamsProjection() eventlog.Projection { return chunk.StreamsProjection() }

// NewStreams is chunk.NewStreams.
func NewStreams(v *eventlog.View) *Streams { return chunk.NewStreams(v) }
