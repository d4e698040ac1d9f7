package backup

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
)

// chunkSize is the size of the chunks a snapshot is sent in, both ways.
const chunkSize = 128 << 10

// chunkTimeout bounds the wait for one chunk of a snapshot, or for the
// server's answer to one chunk of a restore.
const chunkTimeout = 30 * time.Second

// apiError is the error a JetStream API response carries.
type apiError struct {
	Code        int    `json:"code"`
	ErrCode     int    `json:"err_code"`
	Description string `json:"description"`
}

func (e *apiError) Error() string {
	return fmt.Sprintf("%s (JetStream error %d)", e.Description, e.ErrCode)
}

// streamNotFound is JetStream's error code for a stream that does not
// exist.
const streamNotFound = 10059

// Snapshot writes stream's snapshot to w, in the server's own format (an
// s2-compressed archive of the stream's store, without its consumers), and
// returns the stream's config and state as the server reported them when
// the snapshot began. It is the JetStream snapshot API: the server sends
// the snapshot in chunks, each acknowledged before the window moves on.
// A stream being written meanwhile is snapshotted at one point in time.
func Snapshot(ctx context.Context, nc *nats.Conn, stream string, w io.Writer) (Stream, error) {
	inbox := nats.NewInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return Stream{}, fmt.Errorf("snapshot %s: %w", stream, err)
	}
	defer sub.Unsubscribe()
	// The server may send a whole window (8 MiB) before the first ack.
	_ = sub.SetPendingLimits(-1, -1)
	req, _ := json.Marshal(map[string]any{"deliver_subject": inbox, "no_consumers": true, "chunk_size": chunkSize})
	msg, err := nc.RequestWithContext(ctx, "$JS.API.STREAM.SNAPSHOT."+stream, req)
	if err != nil {
		return Stream{}, fmt.Errorf("snapshot %s: %w", stream, err)
	}
	var resp struct {
		Error  *apiError       `json:"error"`
		Config json.RawMessage `json:"config"`
		State  json.RawMessage `json:"state"`
	}
	if err := json.Unmarshal(msg.Data, &resp); err != nil {
		return Stream{}, fmt.Errorf("snapshot %s: bad reply: %w", stream, err)
	}
	if resp.Error != nil {
		return Stream{}, fmt.Errorf("snapshot %s: %w", stream, resp.Error)
	}
	st := Stream{Name: stream, Config: resp.Config, State: resp.State}
	for {
		cctx, cancel := context.WithTimeout(ctx, chunkTimeout)
		m, err := sub.NextMsgWithContext(cctx)
		cancel()
		if err != nil {
			return st, fmt.Errorf("snapshot %s: waiting for a chunk: %w", stream, err)
		}
		if len(m.Data) == 0 {
			// The end: status 204, or the server's error.
			if code := m.Header.Get("Status"); code != "" && code != "204" {
				return st, fmt.Errorf("snapshot %s: the server ended it: %s %s", stream, code, m.Header.Get("Description"))
			}
			return st, nil
		}
		if _, err := w.Write(m.Data); err != nil {
			return st, fmt.Errorf("snapshot %s: write: %w", stream, err)
		}
		st.Size += int64(len(m.Data))
		if m.Reply != "" {
			if err := nc.Publish(m.Reply, nil); err != nil {
				return st, fmt.Errorf("snapshot %s: ack: %w", stream, err)
			}
		}
	}
}

// Restore creates the stream st.Name from the snapshot read from r, with
// st's config (its replicas set to replicas when that is not 0) and state.
// The stream must not exist. It is the JetStream restore API: each chunk is
// a request the server answers once it stored it; an empty request ends
// the restore, and its answer is the new stream's info or the error.
func Restore(ctx context.Context, nc *nats.Conn, st Stream, replicas int, r io.Reader) error {
	cfg := st.Config
	if replicas > 0 {
		var m map[string]any
		if err := json.Unmarshal(cfg, &m); err != nil {
			return fmt.Errorf("restore %s: bad config: %w", st.Name, err)
		}
		m["num_replicas"] = replicas
		cfg, _ = json.Marshal(m)
	}
	req, _ := json.Marshal(map[string]json.RawMessage{"config": cfg, "state": st.State})
	msg, err := nc.RequestWithContext(ctx, "$JS.API.STREAM.RESTORE."+st.Name, req)
	if err != nil {
		return fmt.Errorf("restore %s: %w", st.Name, err)
	}
	var resp struct {
		Error          *apiError `json:"error"`
		DeliverSubject string    `json:"deliver_subject"`
	}
	if err := json.Unmarshal(msg.Data, &resp); err != nil {
		return fmt.Errorf("restore %s: bad reply: %w", st.Name, err)
	}
	if resp.Error != nil {
		return fmt.Errorf("restore %s: %w", st.Name, resp.Error)
	}
	buf := make([]byte, chunkSize)
	for {
		n, rerr := io.ReadFull(r, buf)
		if n > 0 {
			if err := sendChunk(ctx, nc, resp.DeliverSubject, buf[:n]); err != nil {
				return fmt.Errorf("restore %s: %w", st.Name, err)
			}
		}
		if errors.Is(rerr, io.EOF) || errors.Is(rerr, io.ErrUnexpectedEOF) {
			break
		}
		if rerr != nil {
			return fmt.Errorf("restore %s: read: %w", st.Name, rerr)
		}
	}
	// The end of the snapshot: the server now builds the stream, which
	// takes a while for a large one.
	cctx, cancel := context.WithTimeout(ctx, 10*chunkTimeout)
	defer cancel()
	end, err := nc.RequestWithContext(cctx, resp.DeliverSubject, nil)
	if err != nil {
		return fmt.Errorf("restore %s: finish: %w", st.Name, err)
	}
	var done struct {
		Error *apiError `json:"error"`
	}
	if err := json.Unmarshal(end.Data, &done); err != nil {
		return fmt.Errorf("restore %s: bad final reply %q: %w", st.Name, truncate(end.Data), err)
	}
	if done.Error != nil {
		return fmt.Errorf("restore %s: %w", st.Name, done.Error)
	}
	return nil
}

// sendChunk sends one chunk of a restore and waits for the server to take
// it: an empty answer, or an error.
//
// In a cluster the server that restores may not be the one the client is
// connected to, and its subscription to subject reaches the client's
// server over the route a moment after the API answered: no responders
// means nobody got the chunk, so it is sent again, for a few seconds.
func sendChunk(ctx context.Context, nc *nats.Conn, subject string, data []byte) error {
	cctx, cancel := context.WithTimeout(ctx, chunkTimeout)
	defer cancel()
	var ack *nats.Msg
	var err error
	for try := 0; ; try++ {
		ack, err = nc.RequestWithContext(cctx, subject, data)
		if !errors.Is(err, nats.ErrNoResponders) || try == 50 {
			break
		}
		select {
		case <-cctx.Done():
			return fmt.Errorf("send chunk: %w", cctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
	if err != nil {
		return fmt.Errorf("send chunk: %w", err)
	}
	if len(ack.Data) == 0 {
		return nil
	}
	var r struct {
		Error *apiError `json:"error"`
	}
	if err := json.Unmarshal(ack.Data, &r); err == nil && r.Error != nil {
		return r.Error
	}
	return fmt.Errorf("send chunk: unexpected answer %q", truncate(ack.Data))
}

func truncate(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return s
}
