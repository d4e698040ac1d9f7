package chat_test

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/forever-agents/forever/blob"
	"github.com/forever-agents/forever/chat"
	"github.com/forever-agents/forever/chat/llm"
	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/eventlog/eventlogtest"
	"github.com/forever-agents/forever/fiber"
	"github.com/forever-agents/forever/verify"
)

// openBlobs opens the blob bucket on e's server and gives e's store it.
func openBlobs(t *testing.T, e *env) *blob.Store {
	t.Helper()
	js, err := jetstream.New(eventlogtest.Connect(t, e.srv))
	if err != nil {
		t.Fatal(err)
	}
	bs, err := blob.Open(t.Context(), js, blob.Config{})
	if err != nil {
		t.Fatal(err)
	}
	e.store.SetBlobs(bs)
	return bs
}

// A tool output over the blob threshold (3 MiB: over one event, which the
// step's op.completed could not hold before) is stored once in the blob
// store, by its digest: the step's result and the assistant message's
// tool part hold the same reference, no event carries the bytes, and no
// message.part is written. The model, the messages view, the views
// rebuilt from the log (before and after compaction) and verify all see
// the whole output.
func TestToolOutputByReference(t *testing.T) {
	e := newEnv(t)
	bs := openBlobs(t, e)
	const size = 3 << 20
	big, err := chat.NewTool("big", "Returns a lot.", func(context.Context, struct{}) (string, error) {
		return strings.Repeat("0123456789abcdef", size/16), nil
	}, chat.WithSafety(chat.Idempotent), chat.WithMaxOutput(4<<20))
	if err != nil {
		t.Fatal(err)
	}
	tools, err := chat.NewTools(big)
	if err != nil {
		t.Fatal(err)
	}
	h := e.host(t, "a1", llm.NewLocal(llm.LocalConfig{Rate: -1}), func(c *chat.Config) {
		c.Tools, c.Blobs = tools, bs
	})
	turn, err := h.a.Send(t.Context(), chat.SendRequest{Text: "/tool big {}"})
	if err != nil {
		t.Fatal(err)
	}
	h.r.Wait()
	if tr := lastTurn(t, e, "a1"); tr.Status != chat.TurnCompleted {
		t.Fatalf("turn = %+v", tr)
	}
	out, _ := json.Marshal(strings.Repeat("0123456789abcdef", size/16))
	ref := blob.RefOf(out)

	check := func(what string, msgs []chat.Message, resolved bool) {
		t.Helper()
		if len(msgs) != 2 || msgs[1].ID != turn.MessageID {
			t.Fatalf("%s: %d messages", what, len(msgs))
		}
		var tool *chat.Part
		for i, p := range msgs[1].Parts {
			if p.Type == chat.PartTool {
				tool = &msgs[1].Parts[i]
			}
		}
		switch {
		case tool == nil:
			t.Fatalf("%s: no tool part in %+v", what, msgs[1])
		case resolved && (string(tool.Output) != string(out) || tool.Blobs != nil):
			t.Fatalf("%s: tool output of %d bytes, blobs %+v; want the %d bytes (part %+v, answer %.300s)", what, len(tool.Output), tool.Blobs, len(out), *tool, msgs[1].Text())
		case !resolved && (len(tool.Output) != 0 || tool.Blobs == nil || tool.Blobs.Output == nil || *tool.Blobs.Output != ref):
			t.Fatalf("%s: tool output of %d bytes, blobs %+v; want the reference %+v", what, len(tool.Output), tool.Blobs, ref)
		}
		// The local model quotes a large output by its size and digest:
		// it was given all of it.
		if want := fmt.Sprintf("%d bytes of sha256 %x", len(out), sha256.Sum256(out)); !strings.Contains(msgs[1].Text(), want) {
			t.Fatalf("%s: the answer %q does not say %q", what, msgs[1].Text(), want)
		}
	}
	check("messages view", settled(t, e, "a1"), true)
	if m, err := e.store.Message("a1", turn.MessageID); err != nil || len(chat.MessageRefs(m)) != 0 {
		t.Fatalf("Message(%s) = %+v, %v", turn.MessageID, chat.MessageRefs(m), err)
	}
	// A page that must fit one reply keeps the reference.
	page, _, err := e.store.Messages("a1", chat.Page{Inline: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	check("a page with Inline", page, false)

	evs, err := e.lg.Read(t.Context(), eventlog.Filter{Agent: "a1"}, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	refs := 0
	for _, ev := range evs {
		if len(ev.Data) > 64<<10 || ev.Type == chat.EventMessagePart {
			t.Fatalf("%s of %d bytes in the log", ev.Type, len(ev.Data))
		}
		if strings.Contains(string(ev.Data), ref.Digest) {
			refs++
			// turn.completed: the answer stored with the outcome
			// (record format 8, Config.EndRecordsWritable).
			if ev.Type != fiber.EventOpCompleted && ev.Type != chat.EventMessageAppended && ev.Type != chat.EventMessageUpdated &&
				ev.Type != chat.EventTurnCompleted {
				t.Fatalf("the reference in %s", ev.Type)
			}
		}
	}
	if refs < 2 {
		t.Fatalf("the reference in %d events, want the step's result and the message", refs)
	}
	stored, err := bs.List(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(stored) != 1 || stored[0] != ref {
		t.Fatalf("blob store holds %+v, want the output once (%+v)", stored, ref)
	}
	checkVerifyBlobs(t, e.lg, bs)

	check("views rebuilt from the log", rebuiltMessages(t, e, "a1"), false)
	if _, err := e.lg.Compact(t.Context(), "a1"); err != nil {
		t.Fatalf("compact: %v", err)
	}
	check("views rebuilt after compaction", rebuiltMessages(t, e, "a1"), false)
	check("messages view after compaction", settled(t, e, "a1"), true)

	// A missing payload is a violation verify reports.
	if err := bs.Delete(t.Context(), ref); err != nil {
		t.Fatal(err)
	}
	ev, err := eventlog.NewEvent("a2", "note.blob", map[string]any{"blob": ref})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.lg.Append(t.Context(), ev); err != nil {
		t.Fatal(err)
	}
	rep, err := verify.Check(t.Context(), e.lg, verify.Options{Blobs: bs})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Has(verify.KindBlobMissing) {
		t.Fatalf("verify after the payload was deleted:\n%s", rep)
	}
}

func checkVerifyBlobs(t *testing.T, lg *eventlog.Log, bs *blob.Store) {
	t.Helper()
	rep, err := verify.Check(t.Context(), lg, verify.Options{Blobs: bs})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() || rep.Blobs == 0 {
		t.Fatalf("verify (%d payloads checked):\n%s", rep.Blobs, rep)
	}
}

// A user message and a client tool result over the threshold are stored
// by reference in their turn.started: the log holds neither's bytes, the
// model and the messages view get both whole.
func TestClientResultByReference(t *testing.T) {
	e := newEnv(t)
	bs := openBlobs(t, e)
	h := e.host(t, "a1", llm.NewLocal(llm.LocalConfig{Rate: -1}), func(c *chat.Config) {
		c.Blobs, c.BlobThreshold = bs, 1024
	})
	long := strings.Repeat("y", 4000)
	prompt := "/tool pick {\"n\":1}\n" + long
	if _, err := h.a.Send(t.Context(), chat.SendRequest{Text: prompt,
		Tools: []llm.Tool{{Name: "pick", Schema: json.RawMessage(`{"type":"object"}`)}}}); err != nil {
		t.Fatal(err)
	}
	h.r.Wait()
	call := waitingCall(t, e)
	picked := strings.Repeat("z", 3000)
	out := json.RawMessage(`{"picked":"` + picked + `"}`)
	if _, err := h.a.Answer(t.Context(), []chat.ToolAnswer{{CallID: call.ToolCallID, Output: out}}, nil); err != nil {
		t.Fatal(err)
	}
	h.r.Wait()
	msgs := settled(t, e, "a1")
	if got := msgs[0].Text(); got != prompt {
		t.Errorf("user message of %d bytes, want %d", len(got), len(prompt))
	}
	if want := "The pick tool returned: " + string(out) + "."; msgs[len(msgs)-1].Text() != want {
		t.Errorf("answer %.80q, want %.80q", msgs[len(msgs)-1].Text(), want)
	}
	evs, err := e.lg.Read(t.Context(), eventlog.Filter{Agent: "a1"}, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs {
		if strings.Contains(string(ev.Data), long) || strings.Contains(string(ev.Data), picked) {
			t.Errorf("%s holds a payload over the threshold", ev.Type)
		}
	}
	checkVerifyBlobs(t, e.lg, bs)
}
