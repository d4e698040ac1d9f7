package chathost

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/forever-agents/forever/agentd/host"
	"github.com/forever-agents/forever/chat"
	"github.com/forever-agents/forever/chat/chunk"
	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/replay"
)

// ownerReads are the gateway's reads of an agent whose views this node
// does not hold (host.ReadsOnOwner: owned views, another node owns the
// agent): each is a read verb sent through the host, which routes it to
// the owner as it routes every command, and the owner answers from its
// views once they applied the agent's events (status: the active turn;
// streams: one stream or the latest; messages: the conversation).
type ownerReads struct{ host *host.Host }

// active is gatewayChats.Active on the owner: the status verb's detail.
func (o ownerReads) active(ctx context.Context, agent string) (replay.Turn, bool, error) {
	out, err := o.host.Command(ctx, host.Command{Agent: agent, Verb: "status"})
	if err != nil {
		return replay.Turn{}, false, host.ClientError(err)
	}
	st, ok := host.ReplyAs[struct {
		Detail struct {
			ActiveTurn *chat.TurnInfo `json:"activeTurn"`
		} `json:"detail"`
	}](out)
	if !ok {
		return replay.Turn{}, false, fmt.Errorf("chathost: the status of %s from its owner: %.200s", agent, out)
	}
	t := st.Detail.ActiveTurn
	if t == nil {
		return replay.Turn{}, false, nil
	}
	return replay.Turn{RequestID: t.RequestID, StreamID: t.StreamID, MessageID: t.AssistantMessageID}, true, nil
}

// stream is freshStreams.Get (stream set) or Latest (stream "") on the
// owner: the streams verb's page of that one stream, or of the newest.
func (o ownerReads) stream(ctx context.Context, agent, stream string) (chunk.StreamInfo, error) {
	req := StreamsRequest{Limit: 1, Stream: stream}
	out, err := o.host.Command(ctx, host.Command{Agent: agent, Verb: "streams", Data: mustJSON(req)})
	if err != nil {
		return chunk.StreamInfo{}, host.ClientError(err)
	}
	page, ok := host.ReplyAs[StreamsPage](out)
	if !ok {
		return chunk.StreamInfo{}, fmt.Errorf("chathost: the streams of %s from its owner: %.200s", agent, out)
	}
	if len(page.Streams) == 0 {
		return chunk.StreamInfo{}, fmt.Errorf("%w: agent %s has no stream %q", chunk.ErrUnknownStream, agent, stream)
	}
	return streamInfoOf(agent, page.Streams[0])
}

// messages is gatewayChats.Messages on the owner: the messages verb,
// page after page for a zero q (the whole conversation).
func (o ownerReads) messages(ctx context.Context, agent string, q replay.MessagesQuery) (any, error) {
	page := func(p chat.Page) (json.RawMessage, error) {
		out, err := o.host.Command(ctx, host.Command{Agent: agent, Verb: "messages", Data: mustJSON(p)})
		if err != nil {
			return nil, host.ClientError(err)
		}
		return out, nil
	}
	if q != (replay.MessagesQuery{}) {
		return page(chat.Page{After: q.After, Limit: q.Limit})
	}
	all := []json.RawMessage{}
	p := chat.Page{Limit: 500}
	for {
		out, err := page(p)
		if err != nil {
			return nil, err
		}
		got, ok := host.ReplyAs[struct {
			Messages []json.RawMessage `json:"messages"`
			Next     string            `json:"next"`
		}](out)
		if !ok {
			return nil, fmt.Errorf("chathost: the messages of %s from its owner: %.200s", agent, out)
		}
		all = append(all, got.Messages...)
		if got.Next == "" {
			break
		}
		p.After = got.Next
	}
	return map[string]any{"messages": all, "next": ""}, nil
}

// streamInfoOf is s, a stream of the streams verb's page, as the view
// holds it (its cursors are strings of digits there).
func streamInfoOf(agent string, s Stream) (chunk.StreamInfo, error) {
	first, err1 := strconv.ParseUint(s.FirstSeq, 10, 64)
	last, err2 := strconv.ParseUint(s.LastSeq, 10, 64)
	if err1 != nil || err2 != nil {
		return chunk.StreamInfo{}, fmt.Errorf("chathost: stream %s of %s from its owner has cursors %q and %q", s.Stream, agent, s.FirstSeq, s.LastSeq)
	}
	return chunk.StreamInfo{Agent: agent, Stream: s.Stream, RequestID: s.RequestID, MessageID: s.MessageID, Status: s.Status,
		Error: s.Error, FirstSeq: eventlog.Seq(first), LastSeq: eventlog.Seq(last), Chunks: s.Chunks,
		StartedAt: s.StartedAt, UpdatedAt: s.UpdatedAt, Expired: s.Expired}, nil
}

// mustJSON encodes a request payload of plain fields, which cannot fail.
func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}
