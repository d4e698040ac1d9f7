package leaderread

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// codeNoMessage is JetStream's "no message found" on a message get.
const codeNoMessage = 10037

// defaultTimeout bounds a request whose ctx has no deadline.
const defaultTimeout = 5 * time.Second

// Last returns the sequence of the last message on subject (wildcards
// allowed) in stream, as the stream's leader holds it; 0 when there is
// none. A refusal (no such stream, the stream electing a leader) is a
// *jetstream.APIError.
func Last(ctx context.Context, js jetstream.JetStream, stream, subject string) (uint64, error) {
	seq, err := get(ctx, js, stream, map[string]any{"last_by_subj": subject})
	if err != nil {
		return 0, fmt.Errorf("leaderread: last of %s on %s: %w", subject, stream, err)
	}
	return seq, nil
}

// Next returns the sequence of the first message on subject (wildcards
// allowed) in stream at or after from, as the stream's leader holds it; 0
// when there is none. Errors as Last's.
func Next(ctx context.Context, js jetstream.JetStream, stream, subject string, from uint64) (uint64, error) {
	seq, err := get(ctx, js, stream, map[string]any{"next_by_subj": subject, "seq": max(from, 1)})
	if err != nil {
		return 0, fmt.Errorf("leaderread: next of %s on %s from %d: %w", subject, stream, from, err)
	}
	return seq, nil
}

// NextSince returns the sequence of the first message on subject
// (wildcards allowed) in stream stored at or after since, as the stream's
// leader holds it (a consumer delivering by start time starts there); 0
// when there is none. Errors as Last's.
func NextSince(ctx context.Context, js jetstream.JetStream, stream, subject string, since time.Time) (uint64, error) {
	seq, err := get(ctx, js, stream, map[string]any{"next_by_subj": subject, "start_time": since.UTC()})
	if err != nil {
		return 0, fmt.Errorf("leaderread: next of %s on %s since %s: %w", subject, stream, since.UTC().Format(time.RFC3339Nano), err)
	}
	return seq, nil
}

// get sends the message get request req to stream's leader.
func get(ctx context.Context, js jetstream.JetStream, stream string, req map[string]any) (uint64, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, defaultTimeout)
		defer cancel()
	}
	body, _ := json.Marshal(req)
	resp, err := js.Conn().RequestWithContext(ctx, apiPrefix(js.Options())+"STREAM.MSG.GET."+stream, body)
	if err != nil {
		return 0, err
	}
	m, err := Decode(resp.Data)
	if err != nil || m == nil {
		return 0, err
	}
	return m.Sequence, nil
}

// Decode decodes the answer to a message get request (STREAM.MSG.GET, from
// the stream's leader): the message, with its headers when they decode;
// nil when the stream holds none that matches; a refusal as a
// *jetstream.APIError, so callers classify it as they classify the client
// library's errors (10008: temporarily unavailable).
func Decode(data []byte) (*jetstream.RawStreamMsg, error) {
	var r struct {
		Message *struct {
			Subject string    `json:"subject"`
			Seq     uint64    `json:"seq"`
			Hdrs    []byte    `json:"hdrs"`
			Data    []byte    `json:"data"`
			Time    time.Time `json:"time"`
		} `json:"message"`
		Error *struct {
			Code        int    `json:"code"`
			ErrCode     int    `json:"err_code"`
			Description string `json:"description"`
		} `json:"error"`
	}
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("bad response %q: %w", data, err)
	}
	switch {
	case r.Error != nil && r.Error.ErrCode == codeNoMessage:
		return nil, nil
	case r.Error != nil:
		return nil, &jetstream.APIError{Code: r.Error.Code, ErrorCode: jetstream.ErrorCode(r.Error.ErrCode), Description: r.Error.Description}
	case r.Message == nil:
		return nil, errors.New("empty response")
	}
	m := &jetstream.RawStreamMsg{Subject: r.Message.Subject, Sequence: r.Message.Seq, Data: r.Message.Data, Time: r.Message.Time}
	if len(r.Message.Hdrs) > 0 {
		if h, err := nats.DecodeHeadersMsg(r.Message.Hdrs); err == nil {
			m.Header = h
		}
	}
	return m, nil
}

// apiPrefix is the JetStream API prefix js sends its requests with.
func apiPrefix(o jetstream.JetStreamOptions) string {
	switch {
	case o.APIPrefix != "":
		if !strings.HasSuffix(o.APIPrefix, ".") {
			return o.APIPrefix + "."
		}
		return o.APIPrefix
	case o.Domain != "":
		return "$JS." + o.Domain + ".API."
	}
	return jetstream.DefaultAPIPrefix
}
