package chathost

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/forever-agents/forever/agentd"
	"github.com/forever-agents/forever/agentd/host"
	"github.com/forever-agents/forever/blob"
	"github.com/forever-agents/forever/chat"
	"github.com/forever-agents/forever/chat/chunk"
	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/replay"
)

// AttachGateway serves the HTTP chat gateway (replay.Gateway: the AI SDK UI
// message stream over SSE, the WebSocket resume handshake, the chat page at
// /) on d's HTTP server, with turns started through host and streams read
// from the chat type's read side.
func AttachGateway(d *agentd.Daemon, h *host.Host, chats *Type) error {
	return d.OnStart(func(ctx context.Context, deps *agentd.Deps) error {
		if chats.Store() == nil {
			return fmt.Errorf("agentd: attach the chat type before the gateway")
		}
		js, err := jetstream.New(deps.Conn)
		if err != nil {
			return err
		}
		gw, err := replay.NewGateway(replay.GatewayConfig{
			Log:            deps.Log,
			Blobs:          blob.NewReader(js, ""),
			Live:           chats.live,
			Chats:          gatewayChats{host: h, log: deps.Log, chats: chats},
			Streams:        freshStreams{log: deps.Log, store: chats.Store(), host: h},
			Stopping:       d.Stopping(),
			AllowedOrigins: d.Config().CORSOrigins,
			Logger:         deps.Logger,
			Registerer:     deps.Registerer,
		})
		if err != nil {
			return err
		}
		d.Handle("/", gw)
		return nil
	})
}

// gatewayChats is the gateway's view of the chat agents: commands through
// the host, so they activate agents and map errors like NATS commands do.
type gatewayChats struct {
	host  *host.Host
	log   *eventlog.Log
	chats *Type
}

var (
	_ replay.Chats       = gatewayChats{}
	_ replay.ActiveTurns = gatewayChats{}
)

func (g gatewayChats) Send(ctx context.Context, agent string, body json.RawMessage) (replay.Turn, error) {
	out, err := g.host.Command(ctx, host.Command{Agent: agent, Verb: "chat", Data: body})
	if err != nil {
		return replay.Turn{}, host.ClientError(err)
	}
	r, ok := host.ReplyAs[Reply](out)
	if !ok {
		return replay.Turn{}, host.ErrNotFound.Wrapf("agent %s is not a chat agent", agent)
	}
	return replay.Turn{RequestID: r.RequestID, StreamID: r.StreamID, MessageID: r.MessageID, After: r.Cursor}, nil
}

func (g gatewayChats) Stop(ctx context.Context, agent string) (bool, error) {
	out, err := g.host.Command(ctx, host.Command{Agent: agent, Verb: "cancel"})
	if err != nil {
		return false, host.ClientError(err)
	}
	m, _ := host.ReplyAs[map[string]bool](out)
	return m["cancelled"], nil
}

// Messages returns a page of the visible conversation as the messages
// verb's page, {"messages":[{id, role, parts}...],"next":"<id>"}: one shape
// on both transports. With a limit or an after it pages as the verb does,
// by count and by bytes; a zero q is the whole conversation in one page
// (the AI SDK and the chat page read it so), with "next":"".
func (g gatewayChats) Messages(ctx context.Context, agent string, q replay.MessagesQuery) (any, error) {
	if _, err := g.host.TypeOf(agent); err != nil {
		return nil, host.ClientError(err)
	}
	if g.host.ReadsOnOwner(agent) {
		return ownerReads{g.host}.messages(ctx, agent, q)
	}
	if err := g.settle(ctx, agent); err != nil {
		return nil, host.ClientError(err)
	}
	read := func(p chat.Page) ([]chat.Message, string, error) { return g.chats.Store().Messages(agent, p) }
	if q != (replay.MessagesQuery{}) {
		msgs, next, err := pageMessages(read, chat.Page{After: q.After, Limit: q.Limit, Inline: inlineLimit(g.host.MaxReply())}, g.host.MaxReply())
		if err != nil {
			return nil, host.ClientError(err)
		}
		if msgs == nil {
			msgs = []chat.Message{}
		}
		return map[string]any{"messages": msgs, "next": next}, nil
	}
	var all []chat.Message
	page := chat.Page{Limit: 500}
	for {
		msgs, next, err := read(page)
		if err != nil {
			return nil, host.ClientError(err)
		}
		all = append(all, msgs...)
		if next == "" {
			break
		}
		page.After = next
	}
	if all == nil {
		all = []chat.Message{}
	}
	return map[string]any{"messages": all, "next": ""}, nil
}

// settle catches this node's views up with the agent and, while its
// running turn's stream has ended but the turn has not recorded its end,
// waits for that (bounded by settleWait, then the views are read as they
// are). The AI SDK reads the conversation as soon as it reads the finish
// chunk, and a turn appends its final message after that chunk; the views
// show it on every node, whichever owns the agent.
func (g gatewayChats) settle(ctx context.Context, agent string) error {
	deadline := time.Now().Add(settleWait)
	for {
		if err := g.catchUp(ctx, agent); err != nil {
			return err
		}
		t, ok, err := g.chats.Store().ActiveTurn(agent)
		if err != nil || !ok {
			return err
		}
		info, err := freshStreams{log: g.log, store: g.chats.Store()}.Get(ctx, agent, t.StreamID)
		if err != nil || !info.Done() || time.Now().After(deadline) {
			return nil // still streaming (or unknown): read what is there
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(settlePoll):
		}
	}
}

// settleWait bounds settle; settlePoll is how often it looks again.
const (
	settleWait = 10 * time.Second
	settlePoll = 5 * time.Millisecond
)

func (g gatewayChats) Active(ctx context.Context, agent string) (replay.Turn, bool, error) {
	if g.host.ReadsOnOwner(agent) {
		return ownerReads{g.host}.active(ctx, agent)
	}
	if err := g.catchUp(ctx, agent); err != nil {
		return replay.Turn{}, false, err
	}
	t, ok, err := g.chats.Store().ActiveTurn(agent)
	if err != nil || !ok {
		return replay.Turn{}, false, err
	}
	return replay.Turn{RequestID: t.RequestID, StreamID: t.StreamID, MessageID: t.AssistantMessageID}, true, nil
}

// freshStreams reads stream metadata after the streams view has applied
// every chunk stored so far, so a resume right after a turn ended sees it
// ended (204) instead of replaying it again. With host set, an agent
// whose views this node does not hold (host.ReadsOnOwner) is read on its
// owner (ownerReads), whose views wait the same way.
type freshStreams struct {
	log   *eventlog.Log
	store *chat.Store
	host  *host.Host // nil: this node's views only
}

var _ replay.StreamIndex = freshStreams{}

func (f freshStreams) catchUp(ctx context.Context, filter eventlog.Filter) {
	waitChunks(ctx, f.log, f.store, filter)
}

func (f freshStreams) Latest(ctx context.Context, agent string) (chunk.StreamInfo, error) {
	if f.host != nil && f.host.ReadsOnOwner(agent) {
		return ownerReads{f.host}.stream(ctx, agent, "")
	}
	f.catchUp(ctx, eventlog.Filter{Agent: agent, Chunks: true})
	return f.store.Streams().Latest(agent)
}

func (f freshStreams) Get(ctx context.Context, agent, stream string) (chunk.StreamInfo, error) {
	if f.host != nil && f.host.ReadsOnOwner(agent) {
		return ownerReads{f.host}.stream(ctx, agent, stream)
	}
	f.catchUp(ctx, eventlog.Filter{Agent: agent, Stream: stream})
	return f.store.Streams().Get(agent, stream)
}

// catchUp waits until this node's chat views applied the agent's last
// event: in a cluster the command that wrote it may have run on another
// node, and a read after its answer must see it.
//
// While the views cannot be written (Log.Stalled) it returns at once, and
// the read serves what the views hold: reads go on during a full disk.
func (g gatewayChats) catchUp(ctx context.Context, agent string) error {
	if g.log.Stalled() != nil {
		return nil
	}
	seq, err := g.log.LastSeq(ctx, eventlog.Filter{Agent: agent})
	if err != nil {
		return err
	}
	return g.chats.Store().WaitFor(ctx, seq)
}
