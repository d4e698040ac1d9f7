package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/forever-agents/forever/agents"
	"github.com/forever-agents/forever/auth"
	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/keepalive"
)

// Dispatch is the last stage of the command path (pipeline.go): the
// command runs here, on the agent's owner (or, for a verb that runs
// anywhere, on the node that took it).

// dispatch runs cmd here: the host's verbs, then the type's (runLocal).
// Its reply is encoded here, once: as JSON it goes back up the path,
// local or forwarded alike.
func (h *Host) dispatch(ctx context.Context, cmd Command) (json.RawMessage, error) {
	typ, err := h.TypeOf(cmd.Agent)
	if err != nil {
		return nil, err
	}
	out, err := h.runLocal(ctx, cmd, typ)
	if err != nil {
		return nil, err
	}
	return encodeReply(out)
}

// encodeReply is a reply as JSON.
func encodeReply(out any) (json.RawMessage, error) {
	body, err := json.Marshal(out)
	if err != nil {
		return nil, fmt.Errorf("agentd: encode reply: %w", err)
	}
	return body, nil
}

// readCatchUp bounds how long a read waits for the views to apply the
// agent's last event before it answers from what they hold.
const readCatchUp = time.Second

// runLocal runs cmd for an agent of type typ here: the host's verbs,
// then the type's, through its CommandHandler.
func (h *Host) runLocal(ctx context.Context, cmd Command, typ string) (any, error) {
	stalled := h.deps.Log.Stalled()
	switch cmd.Verb {
	case "log":
		// Read from the log itself, on any node (runsAnywhere): no view
		// to wait for, and it reads on while the views are stalled.
	case "fibers", "schedules", "status":
		// Reads see every write acknowledged before them; while the views
		// cannot be written (a full disk) they serve what the views hold,
		// and so they do when JetStream cannot say what the agent's last
		// event is within readCatchUp (its stream has no leader: an
		// election, a full store in a cluster), so a read always answers.
		if stalled != nil {
			break
		}
		cctx, cancel := context.WithTimeout(ctx, readCatchUp)
		err := h.catchUp(cctx, cmd.Agent)
		cancel()
		switch {
		case err == nil:
		case ctx.Err() == nil && (eventlog.Transient(err) || errors.Is(err, context.DeadlineExceeded)):
			h.logger.Debug("read answered from the views without catching up", "agent", cmd.Agent, "verb", cmd.Verb, "err", err)
		default:
			return nil, err
		}
	default:
		// No other command could see its own writes: refuse it at once
		// (503) rather than write events nobody can read back yet.
		if stalled != nil {
			return nil, stalled
		}
	}
	switch cmd.Verb {
	case "log":
		return h.readLog(ctx, cmd)
	case "fibers":
		return h.fibers(cmd)
	case "schedules":
		list, err := h.sched.List(cmd.Agent)
		if list == nil {
			list = []keepalive.Schedule{}
		}
		return list, err
	case "status":
		return h.status(ctx, cmd, typ)
	case "meta":
		return h.meta(ctx, cmd)
	case "delete":
		return h.deleteAgent(ctx, cmd.Agent)
	case "fork":
		return h.forkHere(ctx, cmd)
	}
	if !h.takes(typ, cmd.Verb) {
		return nil, ErrNotFound.Wrapf("agent type %s takes no command %q", typ, cmd.Verb)
	}
	// The meta of a payload rides on writes only: a read (or an approve)
	// neither creates an agent nor sets its user context.
	var meta *agents.MetaPatch
	if a := auth.VerbAccess(cmd.Verb); a == auth.AccessWrite || a == auth.AccessAdmin {
		var err error
		if meta, err = payloadMeta(cmd.Data); err != nil {
			return nil, err
		}
	}
	return h.use(ctx, cmd.Agent, func(inst *instance) (any, error) {
		ch, ok := inst.agent.(CommandHandler)
		if !ok {
			return nil, ErrNotFound.Wrapf("agent type %s takes no command %q", inst.typ, cmd.Verb)
		}
		out, err := ch.HandleCommand(ctx, cmd)
		if err == nil && meta != nil {
			// After the command, so a refused one writes nothing. The
			// reply stands if this write fails: the agent's next command
			// that carries the meta sets it.
			if merr := h.firstMeta(ctx, inst, meta); merr != nil {
				inst.env.Logger.Warn("store the meta of a command", "verb", cmd.Verb, "err", merr)
			}
		}
		return out, err
	})
}

// catchUp waits until the runs and schedules views have applied the agent's
// last event.
func (h *Host) catchUp(ctx context.Context, agent string) error {
	seq, err := h.deps.Log.LastSeq(ctx, eventlog.Filter{Agent: agent})
	if err != nil {
		return err
	}
	if err := h.table.WaitFor(ctx, seq); err != nil {
		return err
	}
	return h.sched.WaitFor(ctx, seq)
}
