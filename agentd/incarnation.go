package agentd

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/forever-agents/forever/internal/inproc"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/forever-agents/forever/internal/atomicfile"
)

// ServerIDFile, under the data dir, holds the ID of the embedded NATS
// server that last ran on it. nats-server draws a new ID at every start.
const ServerIDFile = "nats-server.id"

// lastServerID returns the ID of the embedded server recorded on dataDir
// by recordServerID, "" when none is.
func lastServerID(dataDir string) (string, error) {
	path := filepath.Join(dataDir, ServerIDFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("read %s: %w", path, err)
	}
	return strings.TrimSpace(string(b)), nil
}

// recordServerID records id as the embedded server running on dataDir.
func recordServerID(dataDir, id string) error {
	path := filepath.Join(dataDir, ServerIDFile)
	if err := atomicfile.Write(path, []byte(id+"\n"), 0o600); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// shutdownSubject is where a NATS server announces its shutdown to the
// other servers of its cluster, in the system account.
const shutdownSubject = "$SYS.SERVER.%s.SHUTDOWN"

// endIncarnation tells every server of the cluster that prev, the
// embedded server of this node's previous process, is gone, as prev
// itself would have on an orderly shutdown.
//
// Why: each server counts an account's connections on the others (for
// the account's connection limit, a tenant's --max-conns) by the last
// count each server sent. A server that was SIGKILLed sent none at its
// end, and the others count its connections until they give it up for
// lost, 150 to 240 s later (nats-server's orphan check). Meanwhile its
// clients connect again elsewhere and its restarted process opens
// agentd's own connections again: each is counted twice, and a tenant
// near its limit is refused connections, and has its newest ones closed
// by every server, agentd's own among them.
//
// The process that runs on a node's data dir after prev is the only one
// that knows prev is gone for good. Were it wrong (two processes on one
// data dir, which nothing supports), prev's connections would be left
// out of the count until prev sent its next one: a connection limit
// held loosely for a while, never a guarantee lost.
//
// The announcement names no server (the shutdown event's "name" is
// empty), so the servers mark no JetStream peer offline for it: this
// node's new server is the peer. nc is a connection of the system
// account to the node's own server; the announcement is flushed to it,
// which sends it on over its routes in order with what it sends later.
func endIncarnation(nc *nats.Conn, prev string) error {
	body, err := json.Marshal(server.ServerInfo{ID: prev})
	if err != nil {
		return err
	}
	if err := nc.Publish(fmt.Sprintf(shutdownSubject, prev), body); err != nil {
		return fmt.Errorf("announce the end of server %s: %w", prev, err)
	}
	if err := nc.Flush(); err != nil {
		return fmt.Errorf("announce the end of server %s: %w", prev, err)
	}
	return nil
}

// endPreviousServer announces the end of the embedded server that ran on
// the data dir before this process's (endIncarnation) and records this
// one's. It needs the system account (auth on). A failure is logged: the
// other servers then give the old server up by their own orphan check.
func (d *Daemon) endPreviousServer(cfg *Config, s *server.Server, op *Operator) {
	prev, err := lastServerID(cfg.DataDir)
	if err == nil && prev != "" && prev != s.ID() {
		var nc *nats.Conn
		nc, err = nats.Connect(InProcessURL(s), inproc.Server(s), nats.Name("agentd system"),
			nats.UserJWTAndSeed(op.System.JWT, string(op.System.Seed)))
		if err == nil {
			err = endIncarnation(nc, prev)
			nc.Close()
		}
		if err == nil {
			d.logger.Info("told the cluster this node's previous NATS server is gone", "server_id", prev)
		}
	}
	if err != nil {
		d.logger.Warn("could not tell the cluster this node's previous NATS server is gone; "+
			"its connections count toward the accounts' limits until the servers give it up (150-240 s)", "err", err)
	}
	if err := recordServerID(cfg.DataDir, s.ID()); err != nil {
		d.logger.Warn("could not record the NATS server's ID", "err", err)
	}
}
