package chathost

import (
	"context"
	"errors"
	"io"
	"net/http"

	"github.com/forever-agents/forever/agentd"
	"github.com/forever-agents/forever/agentd/host"
	"github.com/forever-agents/forever/chat"
	"github.com/forever-agents/forever/internal/apierror"
)

// Forking is the chat type's part of the fork verb:
// host.SetForking("chat", chats.Forking()). A fork inherits the parent's
// messages up to the message at (chat.Store.ForkPoint), which the
// messages view reads through the parent's rows (chat/fork.go); an at the
// parent does not have is a 400.
func (ct *Type) Forking() host.Forking {
	return host.Forking{
		Point: func(_ context.Context, parent, at string) (uint64, error) {
			if ct.store == nil {
				return 0, host.ErrUnavailable.Wrapf("the chat views are not open yet")
			}
			n, err := ct.store.ForkPoint(parent, at)
			if errors.Is(err, chat.ErrNotFound) {
				return 0, host.ErrBadRequest.Wrapf("fork: agent %s has no message %q to fork at (at takes a message id, as in its messages)", parent, at)
			}
			return n, err
		},
		Forks: func(parent string) ([]host.ForkRef, error) {
			if ct.store == nil {
				return nil, host.ErrUnavailable.Wrapf("the chat views are not open yet")
			}
			forks, err := ct.store.Forks(parent)
			out := make([]host.ForkRef, len(forks))
			for i, f := range forks {
				out[i] = host.ForkRef(f)
			}
			return out, err
		},
	}
}

// maxForkBody bounds the body of POST /v1/chat/{id}/fork.
const maxForkBody = 16 << 10

// attachFork serves POST /v1/chat/{id}/fork with the fork verb's payload,
// {"to": "<new agent id>", "at": "<message id>"}; its reply is the verb's
// (host.ForkReply).
func attachFork(d *agentd.Daemon, h *host.Host) {
	d.Handle("POST /v1/chat/{id}/fork", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxForkBody))
		if err != nil {
			apierror.New(apierror.BadRequest, "the body of a fork must be at most %d bytes of JSON: {\"to\": \"<new agent id>\", \"at\": \"<message id>\"}", maxForkBody).WriteHTTP(w)
			return
		}
		var req host.ForkRequest
		if err := apierror.Decode(body, &req, apierror.Subject("the body")); err != nil {
			host.ClientError(err).WriteHTTP(w)
			return
		}
		host.ServeCommand(w, r, h, "fork", req)
	}))
}
