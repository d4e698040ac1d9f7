package agentd

import (
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/jetstreamext"
)

// TestConnectSyncQueue: the daemon's connection gives each synchronous
// subscription a buffer of syncQueueLen messages, not nats.go's 65,536
// (a 512 KiB channel for each live follow and batched direct get), and
// that buffer still holds a whole batched get of the largest size the
// daemon asks for, sent before the reader reads any of it.
func TestConnectSyncQueue(t *testing.T) {
	cfg := Config{DataDir: t.TempDir(), NATSListen: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0",
		Logger: slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))}
	d, s := serverOf(t, cfg)
	nc, err := connect(&d.cfg, s, d.cfg.Logger, make(chan struct{}), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	if got := nc.Opts.SubChanLen; got != syncQueueLen {
		t.Fatalf("SubChanLen = %d, want %d", got, syncQueueLen)
	}

	ctx := t.Context()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "SQ", Subjects: []string{"sq.>"}, AllowDirect: true}); err != nil {
		t.Fatal(err)
	}
	const batch = 256 // eventlog's readBatch and replay's followStored
	for i := range batch + 10 {
		if _, err := js.Publish(ctx, "sq.a", fmt.Appendf(nil, "%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	msgs, err := jetstreamext.GetBatch(ctx, js, "SQ", batch, jetstreamext.GetBatchSeq(1))
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // the whole batch arrives unread
	n := 0
	for _, err := range msgs {
		if err != nil {
			t.Fatalf("after %d messages: %v", n, err)
		}
		n++
	}
	if n != batch {
		t.Fatalf("read %d messages, want %d", n, batch)
	}
}
