package chathost

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/forever-agents/forever/agentd"
	"github.com/forever-agents/forever/agentd/agentdtest"
	"github.com/forever-agents/forever/agentd/host"
	"github.com/forever-agents/forever/blob"
	"github.com/forever-agents/forever/chat"
	"github.com/forever-agents/forever/chat/llm"
	"github.com/forever-agents/forever/internal/waitfor"
	"github.com/forever-agents/forever/verify"
)

// bigInput is the input of the test's big tool: its output is Size bytes
// of Fill, the same for the same input.
type bigInput struct {
	Fill string `json:"fill"`
	Size int    `json:"size"`
}

// TestBlobSweep: a payload stored by reference by two agents is one
// object, kept while either names it; after both are deleted a sweep
// within the grace period keeps it and one after deletes it. A fork keeps
// what it inherited from its deleted parent until it is deleted too.
// verify stays clean throughout.
func TestBlobSweep(t *testing.T) {
	cfg := agentdtest.Config(t)
	cfg.BlobThreshold = 1024
	cfg.BlobGrace = time.Hour // the daemon's own sweeps delete nothing here
	d, err := agentd.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	big, err := chat.NewTool("big", "Returns size bytes of fill.",
		func(_ context.Context, in bigInput) (string, error) { return strings.Repeat(in.Fill, in.Size), nil })
	if err != nil {
		t.Fatal(err)
	}
	tools, err := chat.NewTools(big)
	if err != nil {
		t.Fatal(err)
	}
	chats := NewType(llm.NewLocal(llm.LocalConfig{Rate: -1}), func(c *chat.Config) { c.Tools = tools })
	if err := chats.Attach(d); err != nil {
		t.Fatal(err)
	}
	h := host.New(host.Config{DefaultType: "chat"})
	if err := h.Register("chat", chats.Factory, Verbs...); err != nil {
		t.Fatal(err)
	}
	if err := h.SetForking("chat", chats.Forking()); err != nil {
		t.Fatal(err)
	}
	if err := h.Attach(d); err != nil {
		t.Fatal(err)
	}
	agentdtest.Start(t, d)
	agentdtest.WaitStatus(t, "http://"+d.HTTPAddr()+"/readyz", 200)
	nc, err := nats.Connect(d.NATSURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()

	turn := func(agent, fill string) {
		t.Helper()
		command(t, nc, agent, "chat", `{"text":"/tool big {\"fill\":\"`+fill+`\",\"size\":4000}"}`, nil)
		waitfor.NoError(t, func() error {
			msgs, _, err := chats.Store().Messages(agent, chat.Page{})
			_, active, aerr := chats.Store().ActiveTurn(agent)
			if err == nil && aerr == nil && !active && len(msgs) >= 2 {
				return nil
			}
			return fmt.Errorf("the turn of %s to end: %v %v", agent, err, aerr)
		})
	}
	objects := func() map[string]int64 {
		t.Helper()
		objs, err := chats.blobs.Objects(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]int64{}
		for _, o := range objs {
			out[o.Digest] = o.Size
		}
		return out
	}
	// a's turn stores its payloads (the tool's output, what the model
	// says of it); b's the same ones again: no new object.
	turn("a", "s")
	shared := objects()
	if len(shared) == 0 {
		t.Fatal("a's turn stored nothing by reference")
	}
	var sharedBytes int64
	for _, n := range shared {
		sharedBytes += n
	}
	turn("b", "s")
	if got := objects(); len(got) != len(shared) {
		t.Fatalf("objects after b stored the same payloads: %v, want %v", got, shared)
	}
	turn("p", "p")
	command(t, nc, "p", "fork", `{"to":"f"}`, nil)
	all := objects()
	inherited := len(all) - len(shared)
	if inherited <= 0 {
		t.Fatalf("p's turn stored nothing new by reference: %v", all)
	}
	check := func(when string) {
		t.Helper()
		r, err := verify.Check(t.Context(), chats.log, verify.Options{Blobs: chats.blobs})
		if err != nil || !r.OK() {
			t.Fatalf("verify %s: %v\n%s", when, err, r)
		}
	}
	check("before the deletes")
	sweep := func(when string, at time.Time) blob.Swept {
		t.Helper()
		sw, err := chats.sweeper.SweepAt(t.Context(), at)
		if err != nil {
			t.Fatalf("sweep %s: %v", when, err)
		}
		return sw
	}
	later := time.Now().Add(2 * time.Hour)

	command(t, nc, "a", "delete", ``, nil)
	command(t, nc, "p", "delete", ``, nil)
	if sw := sweep("after a's and p's delete", later); sw.Deleted != 0 || sw.Referenced != len(all) {
		t.Fatalf("sweep with b and the fork f left: %+v, want all %d objects referenced", sw, len(all))
	}
	if got := objects(); len(got) != len(all) {
		t.Fatalf("objects after a's and p's delete: %v", got)
	}
	check("after a's and p's delete")

	command(t, nc, "b", "delete", ``, nil)
	if sw := sweep("within the grace period", time.Now()); sw.Deleted != 0 || sw.Kept != len(shared) {
		t.Fatalf("sweep within the grace period: %+v, want the %d shared objects kept", sw, len(shared))
	}
	if sw := sweep("after the grace period", later); sw.Deleted != len(shared) || sw.Bytes != sharedBytes || sw.Referenced != inherited {
		t.Fatalf("sweep after b's delete: %+v, want the %d shared objects (%d bytes) deleted and the fork's %d kept", sw, len(shared), sharedBytes, inherited)
	}
	got := objects()
	for dg := range shared {
		if _, ok := got[dg]; ok {
			t.Fatalf("objects after b's delete: %v, still holds the shared %s", got, dg)
		}
	}
	if len(got) != inherited {
		t.Fatalf("objects after b's delete: %v, want the fork's %d", got, inherited)
	}
	if msgs, _, err := chats.Store().Messages("f", chat.Page{}); err != nil || len(msgs) < 2 {
		t.Fatalf("the fork's messages after the sweep: %d, %v", len(msgs), err)
	}
	check("after the shared object's sweep")

	command(t, nc, "f", "delete", ``, nil)
	if sw := sweep("after the fork's delete", later); sw.Deleted != inherited {
		t.Fatalf("sweep after f's delete: %+v, want the inherited object deleted", sw)
	}
	if got := objects(); len(got) != 0 {
		t.Fatalf("objects after every agent's delete: %v", got)
	}
	check("after every delete")

	// The same payload stored again after its sweep is stored anew.
	turn("c", "s")
	got = objects()
	for dg := range shared {
		if _, ok := got[dg]; !ok || len(got) != len(shared) {
			t.Fatalf("objects after c stores the payloads again: %v, want %v", got, shared)
		}
	}
	check("after the payload is stored again")
}
