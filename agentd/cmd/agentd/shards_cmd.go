package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/forever-agents/forever/agentd"
)

const shardsUsage = `Usage:
  agentd shards move --shards K --data dir
      move the agents of a stopped single node's data dir into K shards
  agentd shards move --shards K [--server url] [--creds file]
      move the agents of a cluster whose agentd nodes are all stopped (its
      NATS servers running: an external NATS, --nats-url) into K shards

Copies every agent's events and chat streams from FOREVER_EVENTS and
FOREVER_CHUNKS into the shard streams FOREVER_EVENTS_<k> and
FOREVER_CHUNKS_<k> (partition p in shard p mod K, the partition in the
subjects), keeping each agent's order, writers and epochs; fibers,
schedules and turns are events, so they move with them. Then it records K
and raises the record format in the partitions bucket, so no node of the
old layout starts again, whatever its release, and deletes the old
streams. Restart every node with --shards K: each rebuilds its views from
the shards at its first start. Sequences change: a client's cursor (tail
--from, replay) from before the move does not carry over.

The cluster must be stopped: the move refuses while a node's heartbeat is
in the lease bucket (a node that crashed counts for a lease TTL). A move
that stopped part way (a crash, Ctrl-C) is finished by running it again.
--partitions is the count to record when none is stored (default 64); the
stored one wins. K must divide it. A cluster with --auth tenants moves
agentd's own account only: once it runs on its shards, each tenant created
unsharded moves with agentd tenant move <name>.

Exit status: 0 moved (or nothing left to do), 1 failed, 2 bad usage.
`

// shardsOpts are the flags of shards move.
type shardsOpts struct {
	natsURL, creds, tlsCA, data *string
	shards, partitions          *int
	timeout                     *time.Duration
}

// shardsFlagSet defines the flags of shards move.
func shardsFlagSet(cmd string, getenv func(string) string) (*flag.FlagSet, *shardsOpts) {
	fset := flag.NewFlagSet("agentd "+cmd, flag.ContinueOnError)
	fset.SetOutput(io.Discard)
	var o shardsOpts
	o.natsURL, o.creds, o.tlsCA = clientFlags(fset, getenv)
	o.data = fset.String("data", "", "data `dir` of a stopped agentd with the embedded server")
	o.shards = fset.Int("shards", 0, "number of stream shards of each kind to move into (at least 2, dividing the partition count)")
	o.partitions = fset.Int("partitions", agentd.DefaultPartitions, "partition count to record when the cluster stored none")
	o.timeout = fset.Duration("timeout", time.Hour, "give up after this long (run the move again to finish it)")
	return fset, &o
}

// shardsCommand runs "agentd shards".
func shardsCommand(ctx context.Context, in invocation, args []string) error {
	getenv, stdout, stderr := in.getenv, in.stdout, in.stderr
	if len(args) == 0 {
		return usageErr("missing subcommand: move")
	}
	if args[0] == "-h" || args[0] == "--help" || args[0] == "-help" {
		return flag.ErrHelp
	}
	if args[0] != "move" {
		return usageErr("unknown subcommand %q: move", args[0])
	}
	fset, o := shardsFlagSet("shards move", getenv)
	if err := fset.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageErr("%v", flagErr(err))
	}
	switch {
	case fset.NArg() > 0:
		return usageErr("unexpected argument %q", fset.Arg(0))
	case *o.shards < 2:
		return usageErr("--shards K is required, at least 2")
	case *o.data != "" && serverSet(fset):
		return usageErr("give --server or --data, not both")
	}
	ctx, cancel := context.WithTimeout(ctx, *o.timeout)
	defer cancel()
	var nc *nats.Conn
	var err error
	if *o.data != "" {
		var release func()
		if nc, release, err = connectDataDir(*o.data, false, "agentd shards move"); err != nil {
			return err
		}
		defer release()
	} else {
		opts := append(clientOptions(*o.creds, *o.tlsCA), nats.Name("agentd shards move"))
		if nc, err = nats.Connect(*o.natsURL, opts...); err != nil {
			return connectError(*o.natsURL, opts, err)
		}
		defer nc.Close()
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	mv, err := agentd.MoveToShards(ctx, nc, *o.shards, *o.partitions, logger)
	if err != nil {
		return err
	}
	if mv.Finished {
		fmt.Fprintf(stdout, "already moved into %d shards: finished (the unsharded streams are deleted)\nstart every node with --shards %d\n", mv.Shards, mv.Shards)
		return nil
	}
	fmt.Fprintf(stdout, "moved %d agents into %d shards of %d partitions: %d events, %d chunks, %d sequence references rewritten, in %s\n",
		mv.Agents, mv.Shards, mv.Partitions, mv.Events, mv.Chunks, mv.Remapped, mv.Took.Round(time.Millisecond))
	fmt.Fprintf(stdout, "messages per shard: %v\nstart every node with --shards %d\n", mv.PerShard, mv.Shards)
	return nil
}
