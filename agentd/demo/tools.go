package demo

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/forever-agents/forever/chat"
)

// The built-in demo tools every chat agent of agentd has.
const (
	// ToolClock tells the time. Idempotent: after a crash it simply runs
	// again.
	ToolClock = "clock"
	// ToolNote appends a line to <data>/notes.txt. Unsafe: a note cut off
	// by a crash is not written again; the model is told its outcome is
	// unknown. A note whose text contains "approve" needs approval.
	ToolNote = "note"
	// NotesFile is the note tool's file in the data dir.
	NotesFile = "notes.txt"
	// ToolBlob returns a text of the bytes asked for, to try large
	// outputs (stored by reference over --blob-threshold). Idempotent:
	// the same input gives the same text.
	ToolBlob = "blob"
	// MaxBlobBytes caps the blob tool's bytes input (64 MiB).
	MaxBlobBytes = 64 << 20
)

// maxDemoDelay caps the delayMs input of the demo tools.
const maxDemoDelay = time.Minute

// ClockInput is the clock tool's input.
type ClockInput struct {
	// DelayMs waits this long before answering, to make the moment the tool
	// runs observable in demos and crash tests. At most 60000.
	DelayMs int `json:"delayMs,omitempty" jsonschema:"milliseconds to wait before answering (demos and tests), at most 60000"`
}

// ClockOutput is the clock tool's output.
type ClockOutput struct {
	Now  string `json:"now"`
	Unix int64  `json:"unix"`
}

// NoteInput is the note tool's input.
type NoteInput struct {
	Text    string `json:"text" jsonschema:"the line to append to the notes file"`
	DelayMs int    `json:"delayMs,omitempty" jsonschema:"milliseconds to wait before writing (demos and tests), at most 60000"`
}

// NoteOutput is the note tool's output.
type NoteOutput struct {
	File  string `json:"file"`
	Lines int    `json:"lines"`
}

// BlobInput is the blob tool's input.
type BlobInput struct {
	Bytes int `json:"bytes" jsonschema:"how many bytes of text to return, at most 67108864"`
}

// BlobOutput is the blob tool's output.
type BlobOutput struct {
	Bytes int    `json:"bytes"`
	Text  string `json:"text"`
}

// blobText is the text the blob tool repeats.
const blobText = "Forever keeps large payloads once, by reference. "

// Blob returns the blob tool's output for in: Bytes bytes of text.
func Blob(in BlobInput) (BlobOutput, error) {
	if in.Bytes < 0 || in.Bytes > MaxBlobBytes {
		return BlobOutput{}, &chat.ToolError{Type: "invalid_input", Message: fmt.Sprintf("bytes must be between 0 and %d", MaxBlobBytes)}
	}
	text := strings.Repeat(blobText, in.Bytes/len(blobText)+1)[:in.Bytes]
	return BlobOutput{Bytes: in.Bytes, Text: text}, nil
}

// Source is the source the tools verb lists the demo tools with.
const Source = "demo"

// Tools returns the built-in clock, note and blob tools, note writing into
// dataDir.
func Tools(dataDir string) (*chat.Tools, error) {
	clock, err := chat.NewTool(ToolClock, "Tells the current time (UTC).",
		func(ctx context.Context, in ClockInput) (ClockOutput, error) {
			if err := demoDelay(ctx, in.DelayMs); err != nil {
				return ClockOutput{}, err
			}
			now := time.Now().UTC()
			return ClockOutput{Now: now.Format(time.RFC3339Nano), Unix: now.Unix()}, nil
		}, chat.WithSafety(chat.Idempotent), chat.WithSource(Source))
	if err != nil {
		return nil, err
	}
	n := &notes{path: filepath.Join(dataDir, NotesFile)}
	note, err := chat.NewTool(ToolNote, "Appends a line of text to the agent's notes file. Needs approval when the text contains \"approve\".",
		n.write, chat.WithSafety(chat.Unsafe), chat.WithSource(Source),
		chat.WithApproval(func(input json.RawMessage) bool {
			var in NoteInput
			return json.Unmarshal(input, &in) == nil && strings.Contains(in.Text, "approve")
		}))
	if err != nil {
		return nil, err
	}
	blob, err := chat.NewTool(ToolBlob, "Returns the number of bytes of text asked for, to try large outputs.",
		func(_ context.Context, in BlobInput) (BlobOutput, error) { return Blob(in) },
		chat.WithSafety(chat.Idempotent), chat.WithSource(Source), chat.WithMaxOutput(MaxBlobBytes+1024))
	if err != nil {
		return nil, err
	}
	return chat.NewTools(clock, note, blob)
}

// notes is the note tool's file; lines are "<call id>\t<text>".
type notes struct {
	mu   sync.Mutex
	path string
}

func (n *notes) write(ctx context.Context, in NoteInput) (NoteOutput, error) {
	if strings.ContainsAny(in.Text, "\r\n") {
		return NoteOutput{}, &chat.ToolError{Type: "invalid_input", Message: "a note is one line"}
	}
	if err := demoDelay(ctx, in.DelayMs); err != nil {
		return NoteOutput{}, err
	}
	call, _ := chat.ToolCallFrom(ctx)
	n.mu.Lock()
	defer n.mu.Unlock()
	f, err := os.OpenFile(n.path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return NoteOutput{}, err
	}
	defer f.Close()
	if _, err := fmt.Fprintf(f, "%s\t%s\n", call.CallID, in.Text); err != nil {
		return NoteOutput{}, err
	}
	if err := f.Sync(); err != nil {
		return NoteOutput{}, err
	}
	data, err := os.ReadFile(n.path)
	if err != nil {
		return NoteOutput{}, err
	}
	return NoteOutput{File: NotesFile, Lines: strings.Count(string(data), "\n")}, nil
}

func demoDelay(ctx context.Context, ms int) error {
	if ms <= 0 {
		return nil
	}
	d := min(time.Duration(ms)*time.Millisecond, maxDemoDelay)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
