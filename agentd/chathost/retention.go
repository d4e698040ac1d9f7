package chathost

import (
	"context"
	"fmt"

	"github.com/forever-agents/forever/agentd"
	"github.com/forever-agents/forever/agentd/host"
	"github.com/forever-agents/forever/chat/chunk"
)

// AttachRetention runs chunk retention in d: a chunk.Sweeper that purges
// the chunks of chat streams that ended more than Config.ChunkMaxAge ago
// and marks them expired in the streams view. Only the agent's owner
// sweeps its streams (host's partition leases). Attach the chat type and
// the host first.
func AttachRetention(d *agentd.Daemon, h *host.Host, chats *Type) error {
	return d.OnStart(func(ctx context.Context, deps *agentd.Deps) error {
		if chats.Store() == nil {
			return fmt.Errorf("agentd: attach the chat type before chunk retention")
		}
		sw, err := chunk.NewSweeper(chunk.SweeperConfig{
			Log:        deps.Log,
			Streams:    chats.Store().Streams(),
			MaxAge:     deps.Log.ChunkMaxAge(),
			Owns:       h.Serves,
			Logger:     deps.Logger,
			Registerer: deps.Registerer,
		})
		if err != nil {
			return err
		}
		return d.Add("chunk retention", sw)
	})
}
