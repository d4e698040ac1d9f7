package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/forever-agents/forever/agentd"
	"github.com/forever-agents/forever/blob"
	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/verify"
)

const verifyUsage = `Usage:
  agentd verify [--server url]   check the log of a running agentd
  agentd verify --creds admin.creds [--server url]
                                   with --auth: check agentd's own log and every tenant's
  agentd verify --data dir         check the log stored in a stopped agentd's data dir

Reads every agent's events and chat streams and checks the invariants of
fibers, turns and streams (package verify). Prints each violation
("violation: ..."), each state worth knowing ("note: ..."), then a summary:

  ok: 3 agents, 41 events, 310 chunk events, 4 fibers, 3 turns, 3 streams, 3 user messages

"ok" or "N violations"; then what was read: agents, events (the events
stream: lifecycle, stashes, turns), chunk events (the chunks stream: the
model's output), fibers and turns started, chat streams, and user messages,
each checked for exactly one turn that answers it. When events hold
payloads by reference (--blob-threshold), the summary ends with how many
were read from the FOREVER_BLOBS bucket and checked against their digest.

Exit status: 0 clean, 1 violations (or the log could not be read), 2 bad
usage. --server (alias --nats-url) defaults to $NATS_URL or nats://127.0.0.1:4222.
`

// verifyServerTimeout bounds the start of the embedded server of --data
// (JetStream recovers the streams first).
const verifyServerTimeout = 2 * time.Minute

// verifyOpts are the flags of verify.
type verifyOpts struct {
	natsURL, creds, tlsCA, data *string
	timeout                     *time.Duration
}

// verifyFlagSet defines the flags of verify.
func verifyFlagSet(cmd string, getenv func(string) string) (*flag.FlagSet, *verifyOpts) {
	fset := flag.NewFlagSet("agentd "+cmd, flag.ContinueOnError)
	fset.SetOutput(io.Discard)
	var o verifyOpts
	o.natsURL, o.creds, o.tlsCA = clientFlags(fset, getenv)
	o.data = fset.String("data", "", "data `dir` of a stopped agentd")
	o.timeout = fset.Duration("timeout", 5*time.Minute, "give up reading after this long")
	return fset, &o
}

// verifyCommand runs "agentd verify". Violations exit 1 after the
// report; a log that cannot be read is a failure even when interrupted.
func verifyCommand(ctx context.Context, in invocation, args []string) error {
	fset, o := verifyFlagSet("verify", in.getenv)
	natsURL, creds, tlsCA, data, timeout := o.natsURL, o.creds, o.tlsCA, o.data, o.timeout
	err := fset.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		return err
	case err != nil:
		return usageErr("%v", flagErr(err))
	case fset.NArg() > 0:
		return usageErr("unexpected argument %q", fset.Arg(0))
	}
	urlSet := serverSet(fset)
	if *data != "" && urlSet {
		return usageErr("give --server or --data, not both")
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	if *data != "" {
		rep, err := verifyDataDir(ctx, *data)
		if err != nil {
			return failed(err)
		}
		fmt.Fprint(in.stdout, rep)
		if !rep.OK() {
			return exitSaid(exitFailed)
		}
		return nil
	}
	ok, err := verifyURL(ctx, *natsURL, clientOptions(*creds, *tlsCA), *creds != "", in.stdout)
	if err != nil {
		return failed(err)
	}
	if !ok {
		return exitSaid(exitFailed)
	}
	return nil
}

// verifyURL checks the log of the agentd serving natsURL and prints the
// report. With the admin credential (admin) it checks every tenant's log
// too, each report headed by "tenant <name>:", and reports whether all
// are clean.
func verifyURL(ctx context.Context, natsURL string, opts []nats.Option, admin bool, stdout io.Writer) (bool, error) {
	opts = append(opts, nats.Name("agentd verify"))
	nc, err := nats.Connect(natsURL, opts...)
	if err != nil {
		return false, connectError(natsURL, opts, err)
	}
	defer nc.Close()
	rep, err := checkConn(ctx, nc)
	if err != nil {
		return false, err
	}
	ok := rep.OK()
	if !admin {
		fmt.Fprint(stdout, rep)
		return ok, nil
	}
	fmt.Fprint(stdout, "agentd:\n", rep)
	access, err := tenantAccess(ctx, nc, nil)
	if err != nil {
		return false, err
	}
	for _, ta := range access {
		err := withTenant(natsURL, opts, ta, func(tnc *nats.Conn) error {
			rep, err := checkConn(ctx, tnc)
			if err == nil {
				fmt.Fprintf(stdout, "tenant %s:\n%s", ta.Tenant, rep)
				ok = ok && rep.OK()
			}
			return err
		})
		if err != nil {
			return false, fmt.Errorf("tenant %s: %w", ta.Tenant, err)
		}
	}
	return ok, nil
}

// verifyDataDir checks the JetStream store of a stopped agentd: it holds
// the Pebble lock of the data dir, so that agentd cannot start meanwhile
// and a running one is refused, and serves the store with an embedded
// nats-server on a random loopback port.
func verifyDataDir(ctx context.Context, dir string) (verify.Report, error) {
	nc, release, err := connectDataDir(dir, false, "agentd verify")
	if err != nil {
		return verify.Report{}, err
	}
	defer release()
	return checkConn(ctx, nc)
}

// connectDataDir serves dir (serveDataDir) and connects to it as name;
// release closes the connection, then stops the server and drops the lock.
func connectDataDir(dir string, create bool, name string) (*nats.Conn, func(), error) {
	s, stop, err := serveDataDir(dir, create)
	if err != nil {
		return nil, nil, err
	}
	nc, err := nats.Connect(s.ClientURL(), nats.Name(name))
	if err != nil {
		stop()
		return nil, nil, fmt.Errorf("connect to the embedded server: %w", err)
	}
	return nc, func() { nc.Close(); stop() }, nil
}

// serveDataDir serves the JetStream store of a stopped agentd's data dir
// with an embedded nats-server on a random loopback port, holding the
// Pebble lock of the data dir meanwhile, so that agentd cannot start and a
// running one is refused. With create, a data dir without a store (a new
// one) is created; release stops the server and drops the lock.
func serveDataDir(dir string, create bool) (*server.Server, func(), error) {
	store := filepath.Join(dir, agentd.JetStreamSubdir)
	if create {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, nil, err
		}
	} else if fi, err := os.Stat(store); err != nil || !fi.IsDir() {
		return nil, nil, fmt.Errorf("%s holds no JetStream store (%s): is it an agentd data dir with the embedded server?", dir, store)
	}
	release := func() {}
	pebbleDir := filepath.Join(dir, agentd.PebbleSubdir)
	if _, err := os.Stat(pebbleDir); err == nil {
		lock, err := vfs.Default.Lock(filepath.Join(pebbleDir, "LOCK"))
		if err != nil {
			return nil, nil, fmt.Errorf("agentd is running on %s (its Pebble store is locked): use --server instead: %w", dir, err)
		}
		release = func() { lock.Close() }
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, nil, err
	}
	s, err := server.NewServer(&server.Options{
		Host:                   "127.0.0.1",
		Port:                   server.RANDOM_PORT,
		JetStream:              true,
		StoreDir:               dir, // nats-server appends "jetstream"
		NoSigs:                 true,
		NoLog:                  true,
		DisableJetStreamBanner: true,
	})
	if err != nil {
		release()
		return nil, nil, fmt.Errorf("embedded server: %w", err)
	}
	s.Start()
	stop := func() {
		s.Shutdown()
		s.WaitForShutdown()
		release()
	}
	if !s.ReadyForConnections(verifyServerTimeout) || !s.JetStreamEnabled() {
		stop()
		return nil, nil, fmt.Errorf("embedded server on %s did not start with JetStream", store)
	}
	return s, stop, nil
}

// checkConn binds to agentd's streams over nc and checks them.
func checkConn(ctx context.Context, nc *nats.Conn) (verify.Report, error) {
	lg, err := eventlog.Open(ctx, eventlog.Config{Conn: nc, Bind: true, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return verify.Report{}, err
	}
	defer lg.Close()
	opts := verify.Options{}
	if js, err := jetstream.New(nc); err == nil {
		bs, err := blob.Bind(ctx, js, "")
		switch {
		case err == nil:
			opts.Blobs = bs
		case !errors.Is(err, blob.ErrNoBucket):
			return verify.Report{}, err
		}
	}
	return verify.Check(ctx, lg, opts)
}
