package main

import (
	"context"
	"io"
	"log/slog"
	"testing"
)

// TestEnvStreamChurn deletes every scenario stream and creates the next one
// at once, as the harness does between scenarios, many times over. Without
// the anchor stream, nats-server's cleanup of the then-empty account dir
// races the next create, which fails with "error creating store for stream".
func TestEnvStreamChurn(t *testing.T) {
	ctx := context.Background()
	env, err := StartEnv(ctx, EnvConfig{Mode: SyncInterval, Dir: t.TempDir(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer env.Close()
	for i := range 200 {
		_, release, err := env.RawStream(ctx)
		if err != nil {
			t.Fatalf("round %d: %v", i, err)
		}
		release()
	}
}
