package chathost

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/forever-agents/forever/agentd/agentdtest"
	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/internal/waitfor"
)

// A stored event no view can decode never stops agentd: the views skip it,
// GET /debug/quarantine names its stream, sequence and subject, and the
// agent it belongs to still chats.
func TestQuarantineCorruptEvent(t *testing.T) {
	d, _ := newChatDaemon(t, agentdtest.Config(t), -1)
	agentdtest.Start(t, d)
	base := "http://" + d.HTTPAddr()
	agentdtest.WaitStatus(t, base+"/readyz", 200)
	nc, err := nats.Connect(d.NATSURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	// A forged, undecodable event on the agent's subject.
	ack, err := nc.Request("forever.evt.broken", []byte("{not an event"), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var pub struct{ Seq eventlog.Seq }
	json.Unmarshal(ack.Data, &pub)

	var qs []eventlog.Quarantined
	waitfor.True(t, "the corrupt event in the quarantine", func() bool {
		code, body := agentdtest.Get(t, base+"/debug/quarantine")
		if code != 200 {
			t.Fatalf("GET /debug/quarantine: %d %s", code, body)
		}
		if err := json.Unmarshal([]byte(body), &qs); err != nil {
			t.Fatal(err)
		}
		return len(qs) > 0
	})
	if q := qs[0]; len(qs) != 1 || q.Seq != pub.Seq || q.Stream != "FOREVER_EVENTS" || q.Subject != "forever.evt.broken" || len(q.Views) == 0 {
		t.Fatalf("quarantine = %+v, want the forged event at seq %d", qs, pub.Seq)
	}
	msg, err := nc.Request("forever.cmd.broken.chat", []byte(`{"text":"hi"}`), 10*time.Second)
	if err != nil || msg.Header.Get("Nats-Service-Error-Code") != "" {
		t.Fatalf("chat with the agent after the corrupt event: %v %v", err, msg)
	}
	if !strings.Contains(string(msg.Data), "streamId") {
		t.Fatalf("chat reply %s", msg.Data)
	}
}
