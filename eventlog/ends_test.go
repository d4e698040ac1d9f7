package eventlog_test

import (
	"fmt"
	"testing"

	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/eventlog/eventlogtest"
	"github.com/nats-io/nats-server/v2/server"
)

// TestEnds: every subject of the chunks stream with its first and last
// stored event and count, read with two gets a subject (batched for the
// last events on R1 direct gets, the leader's answers on R3), and the
// stream's last sequence, which covers every event Ends saw; events of
// the other stream are not listed.
func TestEnds(t *testing.T) {
	for _, tc := range []struct {
		name string
		srv  func(t *testing.T) (*server.Server, int)
	}{
		{"R1", func(t *testing.T) (*server.Server, int) {
			return eventlogtest.RunServer(t, eventlogtest.ServerOptions{}), 1
		}},
		{"R3", func(t *testing.T) (*server.Server, int) {
			return eventlogtest.RunCluster(t, 3)[0], 3
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, replicas := tc.srv(t)
			lg := eventlogtest.OpenOn(t, srv, eventlog.Config{Replicas: replicas})
			ctx := t.Context()
			var evs []eventlog.Event
			want := map[string][2]string{} // subject -> first and last id
			for s := range 5 {
				stream := fmt.Sprintf("s%d", s)
				for i := range s + 1 { // s0 holds one event, s4 five
					evs = append(evs, eventlog.Event{Agent: "a1", Stream: stream, Type: "chunk", ID: fmt.Sprintf("%s/%d", stream, i), Data: []byte(`{}`)})
				}
				want[lg.Prefix()+".chunk.a1."+stream] = [2]string{stream + "/0", fmt.Sprintf("%s/%d", stream, s)}
			}
			if _, err := lg.AppendBatch(ctx, evs); err != nil {
				t.Fatal(err)
			}
			if _, err := lg.Append(ctx, eventlog.Event{Agent: "a1", Type: "note", Data: []byte(`{}`)}); err != nil {
				t.Fatal(err)
			}
			ends, upto, err := lg.Ends(ctx, eventlog.Filter{Chunks: true})
			if err != nil {
				t.Fatal(err)
			}
			last, err := lg.LastSeq(ctx, eventlog.Filter{Chunks: true})
			if err != nil || upto != last {
				t.Fatalf("upto %d, the chunks stream's last %d (%v)", upto, last, err)
			}
			if len(ends) != len(want) {
				t.Fatalf("%d subjects, want %d: %+v", len(ends), len(want), ends)
			}
			for i, se := range ends {
				w, ok := want[se.Subject]
				if !ok || se.Err != nil || se.First.ID != w[0] || se.Last.ID != w[1] || se.Count != uint64(i+1) ||
					se.First.Stream != fmt.Sprintf("s%d", i) || se.Last.Seq < se.First.Seq || se.Last.Seq > upto {
					t.Fatalf("subject %d = %+v, want first %s and last %s", i, se, w[0], w[1])
				}
			}
		})
	}
}
