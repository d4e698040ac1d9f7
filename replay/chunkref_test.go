package replay_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/forever-agents/forever/blob"
	"github.com/forever-agents/forever/chat/chunk"
	"github.com/forever-agents/forever/eventlog/eventlogtest"
	"github.com/forever-agents/forever/replay"
)

// A chunk that holds its payload by reference (chunk.Blobs) reaches
// gateway clients as it was written: the SSE stream of the turn, a
// resume with Last-Event-ID and a GET replay all carry the whole output
// and never the reference, the cursors as stored. Without Blobs the
// gateway sends the AI SDK's shape with the output null, the reference
// left out.
func TestSSEResolvesChunkReferences(t *testing.T) {
	var bs *blob.Store
	e := newEnv(t, func(c *replay.GatewayConfig) { c.Blobs = lateBlobs{&bs} })
	js, err := jetstream.New(eventlogtest.Connect(t, e.s))
	if err != nil {
		t.Fatal(err)
	}
	if bs, err = blob.Open(t.Context(), js, blob.Config{}); err != nil {
		t.Fatal(err)
	}
	out, _ := json.Marshal(map[string]string{"text": strings.Repeat("x", 40<<10)}) // over the threshold below

	resp := postChat(t, e, t.Context(), body("c1"))
	ft := e.turn(t)
	all := script(ft)
	for i, c := range all {
		if c.Type == chunk.ToolOutput {
			c.Output = out
			if all[i], err = chunk.Offload(t.Context(), bs, 1024, c); err != nil {
				t.Fatal(err)
			}
			if all[i].Blobs.Ref("output") == nil || len(all[i].Output) != 0 {
				t.Fatalf("offloaded chunk %+v", all[i])
			}
		}
	}
	e.write(t, ft, all...)
	checkOutput := func(what string, evs []sseEvent) {
		t.Helper()
		found := false
		for _, ev := range evs {
			if strings.Contains(ev.Data, `"blobs"`) || strings.Contains(ev.Data, "sha256:") {
				t.Fatalf("%s: a client sees the reference: %.200s", what, ev.Data)
			}
			if strings.Contains(ev.Data, `"type":"tool-output-available"`) {
				found = true
				if want := `,"output":` + string(out) + `}`; !strings.HasSuffix(ev.Data, want) {
					t.Fatalf("%s: output chunk of %d bytes, want the output of %d", what, len(ev.Data), len(out))
				}
			}
		}
		if !found {
			t.Fatalf("%s: no output chunk in %d events", what, len(evs))
		}
	}
	live := newSSE(t, resp).rest()
	checkSequence(t, live, ft.MessageID)
	checkOutput("the turn's stream", live)
	if len(live) != len(all)+1 {
		t.Fatalf("%d events, want %d chunks and [DONE]", len(live), len(all))
	}
	// A resume after each cursor gets exactly what follows it.
	for i := 0; i < len(all)-1; i++ {
		rest := newSSE(t, get(t, e, "/v1/chat/c1/stream?after="+live[i].ID)).rest()
		if len(rest) != len(live)-i-1 {
			t.Fatalf("after %s: %d events, want %d", live[i].ID, len(rest), len(live)-i-1)
		}
		for k := range rest {
			if rest[k] != live[i+1+k] {
				t.Fatalf("after %s: event %d = %.100v, want %.100v", live[i].ID, k, rest[k], live[i+1+k])
			}
		}
	}

	// A gateway without the blob store.
	plain, err := replay.NewGateway(replay.GatewayConfig{Log: e.lg, Chats: e.chats, Streams: replay.ProjectedIndex{Streams: e.streams}})
	if err != nil {
		t.Fatal(err)
	}
	e.srv.Config.Handler = plain
	for _, ev := range newSSE(t, get(t, e, "/v1/chat/c1/stream?after="+live[0].ID)).rest() {
		if strings.Contains(ev.Data, `"type":"tool-output-available"`) && !strings.HasSuffix(ev.Data, `"output":null}`) {
			t.Fatalf("without blobs: %.300s", ev.Data)
		}
	}
}

// lateBlobs is the blob store *p, opened after the gateway.
type lateBlobs struct{ p **blob.Store }

func (l lateBlobs) Get(ctx context.Context, r blob.Ref) ([]byte, error) { return (*l.p).Get(ctx, r) }
