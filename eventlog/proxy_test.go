package eventlog_test

import (
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
)

// forwardToJS sends m, a request a test's proxy took on proxy.API.>, on to
// the server's JetStream API ($JS.API.>), whose answer goes to m's reply
// subject as if the proxy were not there.
func forwardToJS(t *testing.T, fwd *nats.Conn, m *nats.Msg) {
	t.Helper()
	out := &nats.Msg{Subject: "$JS.API." + strings.TrimPrefix(m.Subject, "proxy.API."), Reply: m.Reply, Data: m.Data, Header: m.Header}
	if err := fwd.PublishMsg(out); err != nil {
		t.Errorf("forward %s: %v", m.Subject, err)
	}
}
