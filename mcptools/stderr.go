package mcptools

import (
	"bytes"
	"log/slog"
	"sync"
)

// maxStderrLine is the longest stderr line logged whole; longer lines are
// logged in pieces of this size.
const maxStderrLine = 4096

// stderrLogger is an io.Writer that logs each line a stdio server writes
// to its stderr.
type stderrLogger struct {
	logger *slog.Logger

	mu  sync.Mutex
	buf []byte // an unfinished line
}

func (w *stderrLogger) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	for {
		var line []byte
		switch i := bytes.IndexByte(w.buf, '\n'); {
		case i >= 0 && i <= maxStderrLine:
			line, w.buf = w.buf[:i], w.buf[i+1:]
		case len(w.buf) >= maxStderrLine:
			line, w.buf = w.buf[:maxStderrLine], w.buf[maxStderrLine:]
		default:
			return len(p), nil
		}
		if line = bytes.TrimRight(line, "\r"); len(line) > 0 {
			w.logger.Info("mcp server stderr", "line", string(line))
		}
	}
}
